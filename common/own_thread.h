/* The library's own threads (the sampling thread, the thread with an fd
 * table of its own): how one is started. Internal. */
#ifndef SNAPPROF_COMMON_OWN_THREAD_H
#define SNAPPROF_COMMON_OWN_THREAD_H

#include <stddef.h>

/* Starts fn(arg) on a new detached thread that takes no signals (every
 * signal blocked from its first instruction: never stopped by our
 * handshake or the program's, never sampled, never running the program's
 * handlers), with a stack of stack_size bytes (0: the default), named
 * name. Returns 0 or pthread_create()'s errno. */
int snapprof__own_thread_start(void *(*fn)(void *), void *arg, size_t stack_size, const char *name);

#endif
