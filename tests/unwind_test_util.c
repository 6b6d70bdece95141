/* Helpers for the unwinder tests and the unwind benchmark (see
 * unwind_test_util.h). */
#include "unwind_test_util.h"

#include "test.h"
#include "test_util.h"

#include <snapprof/jit.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *uw_kind_name(uw_kind_t kind)
{
    static const char *const names[UW_KIND_COUNT] = {"default", "frame-pointer", "libunwind",
                                                     "hybrid", "cfi-table"};
    return (unsigned)kind < UW_KIND_COUNT ? names[kind] : "?";
}

snapprof_unwinder_t *uw_create_unwinder(uw_kind_t kind)
{
    snapprof_unwinder_t *u = NULL;
    switch (kind) {
    case UW_FP:
        ASSERT_OK(snapprof_frame_pointer_unwinder_create(&u));
        break;
    case UW_LIBUNWIND:
        ASSERT_OK(snapprof_libunwind_unwinder_create(&u));
        break;
    case UW_HYBRID:
        ASSERT_OK(snapprof_hybrid_unwinder_create(&u));
        break;
    case UW_CFI_TABLE:
        ASSERT_OK(snapprof_cfi_table_unwinder_create(&u));
        break;
    default:
        break;
    }
    return u;
}

/* ------------------------------------------------------------------------ */
/* Workers                                                                  */
/* ------------------------------------------------------------------------ */

void uw_worker_enter(uw_worker_t *w)
{
    ASSERT_OK(snapprof_thread_register(&w->token));
    w->tid = snapprof_thread_tid(w->token);
    /* glibc's backtrace() (libgcc's unwinder, independent of ours) names
     * the thread's outermost frames by their return addresses. libunwind
     * also exports a "backtrace" that the link would bind to, so take
     * glibc's own by name. */
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NOT_NULL(libc);
    int (*glibc_backtrace)(void **, int) = (int (*)(void **, int))dlsym(libc, "backtrace");
    ASSERT_NOT_NULL(glibc_backtrace);
    dlclose(libc);
    void *pcs[128];
    int n = glibc_backtrace(pcs, 128);
    ASSERT_GT(n, 2);
    ASSERT_LT(n, 128);
    w->entry_pc[0] = (uintptr_t)pcs[n - 1] - 1;
    w->entry_pc[1] = (uintptr_t)pcs[n - 2] - 1;
    atomic_store(&w->ready, 1);
}

void uw_worker_start(uw_worker_t *w)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (w->stack_size)
        ASSERT_EQ(pthread_attr_setstacksize(&attr, w->stack_size), 0);
    atomic_store(&w->ready, 0);
    atomic_store(&w->stop, 0);
    ASSERT_EQ(pthread_create(&w->th, &attr, w->entry, w), 0);
    pthread_attr_destroy(&attr);
    while (!atomic_load(&w->ready))
        usleep(1000);
}

void uw_worker_stop(uw_worker_t *w)
{
    atomic_store(&w->stop, 1);
    pthread_join(w->th, NULL);
    snapprof_thread_release(w->token);
    w->token = NULL;
}

/* ------------------------------------------------------------------------ */
/* Collector                                                                */
/* ------------------------------------------------------------------------ */

static int collect(void *ud, const snapprof_sample_t *s)
{
    uw_collector_t *c = ud;
    if (c->count == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 1024;
        c->samples = realloc(c->samples, c->cap * sizeof *c->samples);
        ASSERT_NOT_NULL(c->samples);
    }
    while (c->frame_count + s->frame_count > c->frame_cap) {
        c->frame_cap = c->frame_cap ? c->frame_cap * 2 : 65536;
        c->frames = realloc(c->frames, c->frame_cap * sizeof *c->frames);
        ASSERT_NOT_NULL(c->frames);
    }
    uw_sample_t *t = &c->samples[c->count++];
    t->tid = s->tid;
    t->flags = s->flags;
    t->cpu_ns = s->cpu_ns;
    t->first = c->frame_count;
    t->count = s->frame_count;
    memcpy(c->frames + c->frame_count, s->frames, s->frame_count * sizeof *s->frames);
    c->frame_count += s->frame_count;
    atomic_store(&c->live, c->count);
    return 0;
}

static int collect_done(void *ud, const snapprof_profile_info_t *info)
{
    uw_collector_t *c = ud;
    c->stats = *info->stats;
    return 0;
}

snapprof_builder_t *uw_collector_builder(uw_collector_t *c)
{
    static const snapprof_builder_ops_t ops = {
        .version = 1, /* receives time samples only */
        .name = "unwind-test-collector",
        .xOnSample = collect,
        .xOnProfileCompleted = collect_done,
    };
    return tu_builder(&ops, c);
}

void uw_collector_free(uw_collector_t *c)
{
    free(c->samples);
    free(c->frames);
    memset(c, 0, sizeof *c);
}

void uw_profile(uw_worker_t *w, const uw_run_t *run, uw_collector_t *out)
{
    snapprof_params_t params = tu_params(run->interval_ns ? run->interval_ns : 1000000u);
    if (run->max_frames)
        params.max_frames = run->max_frames;
    if (run->stack_buffer_size)
        params.stack_buffer_size = run->stack_buffer_size;
    params.trigger = run->trigger;
    snapprof_profiler_t *p;
    ASSERT_OK(snapprof_profiler_create(&params, &w->token, 1, &p));
    uw_kind_t kind = run->kind;
    const char *env = getenv("SNAPPROF_TEST_UNWINDER");
    if (kind == UW_DEFAULT && env && strcmp(env, "cfi_table") == 0)
        kind = UW_CFI_TABLE;
    if (kind == UW_CFI_TABLE) {
        /* The default chain with the tables in front of libunwind; an
         * extra unwinder goes before the frame-pointer unwinder, which
         * would claim any frame. */
        snapprof_unwinder_t *chain[6];
        size_t n = 0;
        ASSERT_OK(snapprof_jit_unwinder_create(&chain[n++]));
        ASSERT_OK(snapprof_cfi_table_unwinder_create(&chain[n++]));
        ASSERT_OK(snapprof_libunwind_unwinder_create(&chain[n++]));
        ASSERT_OK(snapprof_debug_frame_unwinder_create(&chain[n++]));
        if (run->extra)
            chain[n++] = run->extra;
        ASSERT_OK(snapprof_frame_pointer_unwinder_create(&chain[n++]));
        for (size_t i = 0; i < n; i++)
            ASSERT_OK(snapprof_profiler_add_unwinder(p, chain[i]));
    } else {
        snapprof_unwinder_t *u = uw_create_unwinder(kind);
        if (u)
            ASSERT_OK(snapprof_profiler_add_unwinder(p, u));
        if (run->extra)
            ASSERT_OK(snapprof_profiler_add_unwinder(p, run->extra));
    }
    ASSERT_OK(snapprof_profiler_add_builder(p, uw_collector_builder(out)));
    ASSERT_OK(snapprof_profiler_start(p));
    /* Under TSan samples come slowly (it defers our signal), so a run is
     * cut short there rather than waiting for every sample. */
    uint64_t timeout = run->timeout_ns        ? run->timeout_ns
                       : tu_sanitizer_build() ? 15000000000u
                                              : 60000000000u;
    uint64_t deadline = tu_mono_ns() + timeout;
    while (atomic_load(&out->live) < run->min_samples && tu_mono_ns() < deadline)
        usleep(5000);
    ASSERT_OK(snapprof_profiler_stop(p));
    snapprof_profiler_destroy(p);
}

/* ------------------------------------------------------------------------ */
/* Names                                                                    */
/* ------------------------------------------------------------------------ */

#define NAME_SLOTS 8192u
static struct {
    uintptr_t pc;
    char *name;
} g_names[NAME_SLOTS];
static pthread_mutex_t g_names_lock = PTHREAD_MUTEX_INITIALIZER;

const char *uw_name(uintptr_t pc)
{
    pthread_mutex_lock(&g_names_lock);
    size_t s = (size_t)((pc * 0x9e3779b97f4a7c15ull) >> 40) % NAME_SLOTS;
    if (!g_names[s].name || g_names[s].pc != pc) {
        snapprof_frame_t f = {
            .pc = pc, .module = snapprof_module_find(pc), .kind = SNAPPROF_FRAME_NATIVE};
        snapprof_symbol_t sym[8];
        int n = snapprof_symbolize(&f, sym, 8);
        free(g_names[s].name);
        g_names[s].pc = pc;
        /* With inline frames the last symbol is the function the code
         * really lives in; the tests name those. */
        g_names[s].name = strdup(n > 0 && sym[n - 1].name ? sym[n - 1].name : "?");
    }
    const char *name = g_names[s].name;
    pthread_mutex_unlock(&g_names_lock);
    return name;
}

int uw_frame_is(const snapprof_frame_t *f, const char *name)
{
    if (f->kind == SNAPPROF_FRAME_MARKER)
        return f->name && strcmp(f->name, name) == 0;
    return strcmp(uw_name(f->pc), name) == 0;
}

long uw_find(const snapprof_frame_t *frames, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (uw_frame_is(&frames[i], name))
            return (long)i;
    return -1;
}

int uw_complete(const snapprof_frame_t *frames, size_t n, const uw_worker_t *w)
{
    if (n == 0 || frames[n - 1].kind == SNAPPROF_FRAME_MARKER)
        return 0;
    return frames[n - 1].pc == w->entry_pc[0] || frames[n - 1].pc == w->entry_pc[1];
}

double uw_complete_rate(const uw_collector_t *c, const uw_worker_t *w, const char *label)
{
    size_t total = 0, complete = 0;
    for (size_t i = 0; i < c->count; i++) {
        const uw_sample_t *s = &c->samples[i];
        if (s->tid != w->tid)
            continue;
        total++;
        complete += uw_complete(uw_frames(c, s), s->count, w);
    }
    double rate = total ? 100.0 * (double)complete / (double)total : 0.0;
    printf("%-40s %6zu samples, %6zu complete: %6.2f %%\n", label, total, complete, rate);
    return rate;
}

void uw_print_sample(const uw_collector_t *c, const uw_sample_t *s)
{
    const snapprof_frame_t *f = uw_frames(c, s);
    printf("sample: %zu frames, flags 0x%x\n", s->count, s->flags);
    for (size_t i = 0; i < s->count && i < 40; i++) {
        if (f[i].kind == SNAPPROF_FRAME_MARKER)
            printf("  #%zu %s\n", i, f[i].name);
        else
            printf("  #%zu %#lx %s (%s)\n", i, (unsigned long)f[i].pc, uw_name(f[i].pc),
                   f[i].module ? f[i].module->path : "no module");
    }
}
