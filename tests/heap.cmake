# Heap sampling (heap/, issue 27): the rule and the live-address set alone,
# and heap profiles in linked mode (note_alloc / note_free around malloc).
snapprof_add_test_cases(EXE heap SOURCES test_heap_sampler.c LIBS m)
snapprof_add_test_cases(EXE heap_profile SOURCES test_heap_profile.c LIBS m)
# Sampled allocations on fiber stacks (swapcontext): stack bounds found
# about once per stack, and each allocation's stack its fiber's.
snapprof_add_test_cases(EXE heap_fiber SOURCES test_heap_fiber.c)
# A tick's heap drain is bounded: slow heap deliveries leave the CPU
# captures drained and the ticks running.
snapprof_add_test_cases(EXE heap_drain_budget SOURCES test_heap_drain_budget.c)
