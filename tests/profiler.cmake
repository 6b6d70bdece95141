# Tests of the profiler component.
