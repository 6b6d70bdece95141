/* Fault injection (fault.h): which calls fail, and SNAPPROF_TEST_FAULTS. */
#include "common/fault.h"
#include "common/hash.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAULT_ENV "SNAPPROF_TEST_FAULTS"

/* The seams installed (NULL: none), and per site the calls counted since
 * they were, whose numbers the seed's hash picks from. */
static _Atomic(const snapprof__fault_seams_t *) g_seams;
static _Atomic uint64_t g_calls[SNAPPROF__FAULT_SITE_COUNT];

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

/* Async-signal-safe: atomics only, no lock, no allocation. With no seams
 * installed, one load. */
int snapprof__fault(snapprof__fault_site_t site)
{
    const snapprof__fault_seams_t *seams = atomic_load_explicit(&g_seams, memory_order_acquire);
    if (!seams || (unsigned)site >= SNAPPROF__FAULT_SITE_COUNT)
        return 0;
    uint32_t one_in = seams->one_in[site];
    if (one_in == 0)
        return 0;
    uint64_t call = atomic_fetch_add_explicit(&g_calls[site], 1, memory_order_relaxed);
    if (one_in > 1 &&
        snapprof__splitmix64_mix(
            seams->seed ^ snapprof__splitmix64_mix(call + 0x9e3779b97f4a7c15ull * (site + 1))) %
                one_in !=
            0)
        return 0;
    if (seams->xOnInjected)
        seams->xOnInjected(seams->user_data, site);
    return 1;
}

void snapprof__fault_set_seams(const snapprof__fault_seams_t *seams)
{
    atomic_store_explicit(&g_seams, NULL, memory_order_release);
    for (int s = 0; s < SNAPPROF__FAULT_SITE_COUNT; s++)
        atomic_store_explicit(&g_calls[s], 0, memory_order_relaxed);
    atomic_store_explicit(&g_seams, seams, memory_order_release);
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

int snapprof__fault_parse(const char *spec, snapprof__fault_seams_t *out, char *why,
                          size_t why_size)
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
    memset(out, 0, sizeof *out);
    memcpy(out->one_in, rate, sizeof rate);
    out->seed = seed;
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
    static snapprof__fault_seams_t from_env; /* installed for the life of the process */
    char why[200], line[320];
    if (snapprof__fault_parse(spec, &from_env, why, sizeof why) == 0) {
        snapprof__fault_set_seams(&from_env);
        return;
    }
    int n = snprintf(line, sizeof line, "snapprof: %s ignored: %s\n", FAULT_ENV, why);
    if (n > 0)
        (void)!write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}
#endif
