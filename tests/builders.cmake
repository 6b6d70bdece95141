# Tests of the folded and trace builders.
