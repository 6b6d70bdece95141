# Tests of the unwinder component.
