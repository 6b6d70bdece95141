# Fault injection (common/fault.h): each system call the profiler depends on
# failing, always and at random, while threads come and go.
snapprof_add_test_cases(EXE faults SOURCES test_faults.c test_profile_builder_util.c TIMEOUT 600)
# A seccomp filter that kills the process for a call the profiler makes
# (common/seccomp.h): found out in a child, never made on the program's
# threads.
snapprof_add_test_cases(EXE seccomp SOURCES test_seccomp.c)
# The thread with an fd table of its own (common/fd_private.h): a file the
# library opens for a moment never takes one of the program's numbers.
snapprof_add_test_cases(EXE fd_private SOURCES test_fd_private.c)
