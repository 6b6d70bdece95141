# Tests of symbolization (module_cache/symbols_*.c).
