# Tests of the module_cache component.
