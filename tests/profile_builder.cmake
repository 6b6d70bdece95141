# Tests of the profile_builder component.
