/* Fault injection (fault.h): which calls fail, and SNAPPROF_TEST_FAULTS. */
#include "common/fault.h"
#include "common/hash.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAULT_ENV "SNAPPROF_TEST_FAULTS"

/* Per site: fail one call in one_in (0: never), chosen by hashing the
 * call's number with the seed. Each member is read on its own, relaxed:
 * a call that races with snapprof__fault_set() may see the old seed with
 * the new rate, which only changes which calls fail. */
static struct {
    _Atomic uint32_t one_in;
    _Atomic uint64_t seed;
    _Atomic uint64_t calls;
    _Atomic uint64_t injected;
} g_sites[SNAPPROF__FAULT_SITE_COUNT];

static const char *const g_names[SNAPPROF__FAULT_SITE_COUNT] = {
    [SNAPPROF__FAULT_PERF_EVENT_OPEN] = "perf_event_open",
    [SNAPPROF__FAULT_TIMER_CREATE] = "timer_create",
    [SNAPPROF__FAULT_MMAP] = "mmap",
    [SNAPPROF__FAULT_OPEN] = "open",
    [SNAPPROF__FAULT_SIGQUEUE] = "rt_tgsigqueueinfo",
    [SNAPPROF__FAULT_WRITE] = "write",
    [SNAPPROF__FAULT_PROCESS_VM_READV] = "process_vm_readv",
    [SNAPPROF__FAULT_HEAP_SLOT] = "heap_slot",
};

/* Async-signal-safe: relaxed atomics only, no lock, no allocation. When no
 * fault is configured at site, one relaxed load. */
int snapprof__fault(snapprof__fault_site_t site)
{
    if ((unsigned)site >= SNAPPROF__FAULT_SITE_COUNT)
        return 0;
    uint32_t one_in = atomic_load_explicit(&g_sites[site].one_in, memory_order_relaxed);
    if (one_in == 0)
        return 0;
    uint64_t call = atomic_fetch_add_explicit(&g_sites[site].calls, 1, memory_order_relaxed);
    uint64_t seed = atomic_load_explicit(&g_sites[site].seed, memory_order_relaxed);
    if (one_in > 1 &&
        snapprof__splitmix64_mix(
            seed ^ snapprof__splitmix64_mix(call + 0x9e3779b97f4a7c15ull * (site + 1))) %
                one_in !=
            0)
        return 0;
    atomic_fetch_add_explicit(&g_sites[site].injected, 1, memory_order_relaxed);
    return 1;
}

void snapprof__fault_set(snapprof__fault_site_t site, uint32_t one_in_n, uint64_t seed)
{
    if ((unsigned)site >= SNAPPROF__FAULT_SITE_COUNT)
        return;
    atomic_store_explicit(&g_sites[site].seed, seed, memory_order_relaxed);
    atomic_store_explicit(&g_sites[site].calls, 0, memory_order_relaxed);
    atomic_store_explicit(&g_sites[site].one_in, one_in_n, memory_order_relaxed);
}

void snapprof__fault_clear(void)
{
    for (int s = 0; s < SNAPPROF__FAULT_SITE_COUNT; s++)
        atomic_store_explicit(&g_sites[s].one_in, 0, memory_order_relaxed);
}

uint64_t snapprof__fault_injected(snapprof__fault_site_t site)
{
    if ((unsigned)site >= SNAPPROF__FAULT_SITE_COUNT)
        return 0;
    return atomic_load_explicit(&g_sites[site].injected, memory_order_relaxed);
}

/* Reads a decimal number of at most max from s; returns the text after it
 * or NULL. */
static const char *parse_num(const char *s, uint64_t max, uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return NULL;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (max - (uint64_t)(*s - '0')) / 10)
            return NULL;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return s;
}

int snapprof__fault_parse(const char *spec, char *why, size_t why_size)
{
    uint32_t rate[SNAPPROF__FAULT_SITE_COUNT] = {0};
    uint64_t seed = 0;
    const char *s = spec;
    while (*s) {
        /* One item: NAME=N, up to a ',' or ';' (the two are the same). */
        const char *eq = s;
        while (*eq && *eq != '=' && *eq != ',' && *eq != ';')
            eq++;
        size_t len = (size_t)(eq - s);
        if (*eq != '=') {
            snprintf(why, why_size, "\"%.*s\" is not NAME=N", (int)len, s);
            return -1;
        }
        int site = -2; /* -1: all, -3: seed */
        if (len == 4 && strncmp(s, "seed", 4) == 0)
            site = -3;
        else if (len == 3 && strncmp(s, "all", 3) == 0)
            site = -1;
        for (int i = 0; i < SNAPPROF__FAULT_SITE_COUNT && site == -2; i++)
            if (strlen(g_names[i]) == len && strncmp(s, g_names[i], len) == 0)
                site = i;
        if (site == -2) {
            snprintf(why, why_size,
                     "unknown site \"%.*s\" (perf_event_open, timer_create, mmap, open, "
                     "rt_tgsigqueueinfo, write, process_vm_readv, heap_slot, all, or seed)",
                     (int)len, s);
            return -1;
        }
        uint64_t v;
        const char *end = parse_num(eq + 1, site == -3 ? UINT64_MAX : UINT32_MAX, &v);
        if (!end || (*end && *end != ',' && *end != ';')) {
            snprintf(why, why_size, "\"%.*s\": N must be a decimal number", (int)len, s);
            return -1;
        }
        if (site == -3) {
            seed = v;
        } else {
            for (int i = 0; i < SNAPPROF__FAULT_SITE_COUNT; i++)
                if (site == -1 || site == i)
                    rate[i] = (uint32_t)v;
        }
        s = *end ? end + 1 : end;
    }
    for (int i = 0; i < SNAPPROF__FAULT_SITE_COUNT; i++)
        snapprof__fault_set((snapprof__fault_site_t)i, rate[i], seed);
    return 0;
}

#if SNAPPROF_TEST_SEAMS
/* Read once, when the library is loaded (before main, so before any thread
 * of ours). Test-only: compiled only with the CMake option
 * SNAPPROF_TEST_SEAMS, so that an installed library never reads it. */
__attribute__((constructor)) static void fault_from_env(void)
{
    const char *spec = getenv(FAULT_ENV);
    if (!spec || !*spec)
        return;
    char why[200], line[320];
    if (snapprof__fault_parse(spec, why, sizeof why) == 0)
        return;
    int n = snprintf(line, sizeof line, "snapprof: %s ignored: %s\n", FAULT_ENV, why);
    if (n > 0)
        (void)!write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}
#endif
