/* Fault injection, a test seam: makes chosen system calls fail as if the
 * kernel had refused them, at random points, so that tests can check that
 * each failure takes the path a real errno would (the program goes on, the
 * failure is counted, nothing already collected is lost). Internal.
 *
 * Configured by tests with snapprof__fault_set_seams(), or, for programs run
 * under the preload library or `snapprof record`, by the test-only
 * environment variable SNAPPROF_TEST_FAULTS, read once when the library is
 * loaded:
 *
 *   SNAPPROF_TEST_FAULTS="perf_event_open=4,open=10,write=1;seed=7"
 *
 * fails about one call in 4 to perf_event_open, one in 10 to open and
 * every write of a profile; the seed picks which ones (the same seed and
 * the same calls: the same failures). Site names: perf_event_open,
 * timer_create, mmap, open, rt_tgsigqueueinfo, write, process_vm_readv,
 * heap_slot (not a system call: a heap capture slot), and all. A value
 * that does not parse costs one line on stderr and is ignored whole.
 * Unset (the default), every call site costs one atomic load. */
#ifndef SNAPPROF_COMMON_FAULT_H
#define SNAPPROF_COMMON_FAULT_H

#include <stddef.h>
#include <stdint.h>

typedef enum snapprof__fault_site {
    SNAPPROF__FAULT_PERF_EVENT_OPEN = 0, /* a trigger's perf event (EMFILE) */
    SNAPPROF__FAULT_TIMER_CREATE,        /* a trigger's CPU-time timer (EAGAIN) */
    SNAPPROF__FAULT_MMAP,                /* the library's own mappings (ENOMEM) */
    SNAPPROF__FAULT_OPEN,                /* a profile's file, /proc/TID/syscall (EMFILE) */
    SNAPPROF__FAULT_SIGQUEUE,            /* the handshake's rt_tgsigqueueinfo (EAGAIN) */
    SNAPPROF__FAULT_WRITE,               /* writing a profile (ENOSPC) */
    SNAPPROF__FAULT_PROCESS_VM_READV,    /* a blocked thread's stack in wall mode (EPERM) */
    SNAPPROF__FAULT_HEAP_SLOT,           /* a sampled allocation finds no free capture slot */
    SNAPPROF__FAULT_SITE_COUNT
} snapprof__fault_site_t;

/* Test seams: the fault sites, as tests/README.md "Test seams" describes.
 * one_in[site]: about one call in N at site fails (1: every call, 0: none),
 * which ones chosen by seed (the same seed and the same calls: the same
 * failures; each site draws its own sequence from it). xOnInjected, if
 * not NULL, is called with user_data after each failure injected, on the
 * thread that made the call, which may be in a signal handler or inside
 * malloc: async-signal-safe code only (a relaxed atomic add). */
typedef struct snapprof__fault_seams {
    uint32_t one_in[SNAPPROF__FAULT_SITE_COUNT];
    uint64_t seed;
    void (*xOnInjected)(void *user_data, snapprof__fault_site_t site);
    void *user_data;
} snapprof__fault_seams_t;

/* Installs seams (NULL: no call fails), held by pointer: it must stay
 * valid until the next call. Each site's count of calls starts again, so
 * that the same seams make the same calls fail. Not for use while another
 * thread installs seams. */
void snapprof__fault_set_seams(const snapprof__fault_seams_t *seams);

/* Nonzero when this call at site should fail (the caller then sets errno
 * as the kernel would and takes its failure path). Async-signal-safe and
 * thread-safe: atomics only, no lock, no allocation. With no seams
 * installed (always, outside tests), one atomic load. */
int snapprof__fault(snapprof__fault_site_t site);

/* Parses a SNAPPROF_TEST_FAULTS value into *out (its callback members
 * NULL). Returns 0, or -1 with a one-line reason in why (*out as it was). */
int snapprof__fault_parse(const char *spec, snapprof__fault_seams_t *out, char *why,
                          size_t why_size);

#endif
