# Tests of the stack_copier component.
