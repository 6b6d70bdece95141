/* A program under a seccomp filter that kills the process for a system
 * call the profiler makes (systemd's SystemCallFilter=@system-service
 * leaves out perf_event_open and process_vm_readv, and kills with
 * SIGSYS): the profiler must find that out without making the call on
 * the program's threads, and degrade as for a refusal (common/seccomp.h).
 * Each case installs its filter on every thread of its own process
 * (SECCOMP_FILTER_FLAG_TSYNC), then profiles itself. Before common/seccomp.c
 * the kill cases died of SIGSYS at the first perf_event_open or
 * process_vm_readv. */
#include "test.h"
#include "test_util.h"

#include "common/fd_private.h"
#include "common/proc_files.h"
#include "common/seccomp.h"
#include "stack_copier/stack_copier.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static uint64_t samples_of(const snapprof_stats_t *st)
{
    return st->samples;
}

/* Profiles the calling thread until 50 samples; returns the stats. */
static snapprof_stats_t profile_self(void)
{
    snapprof_thread_t *self;
    snapprof_profiler_t *p = tu_profile_self(&self);
    ASSERT_OK(snapprof_profiler_start(p));
    tu_burn_until(p, samples_of, 50);
    ASSERT_OK(snapprof_profiler_stop(p));
    snapprof_stats_t st;
    ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    printf("samples %" PRIu64 ", perf %" PRIu64 ", timer %" PRIu64 ", handshake %" PRIu64
           "; fallback from %d errno %d; perf_event_open %s, process_vm_readv %s\n",
           st.samples, st.threads_by_trigger[SNAPPROF_TRIGGER_PERF_EVENT],
           st.threads_by_trigger[SNAPPROF_TRIGGER_CPU_TIMER],
           st.threads_by_trigger[SNAPPROF_TRIGGER_HANDSHAKE], (int)st.trigger_fallback_from,
           st.trigger_fallback_errno,
           snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PERF_EVENT_OPEN) ? "made" : "never made",
           snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PROCESS_VM_READV) ? "made" : "never made");
    snapprof_profiler_destroy(p);
    snapprof_thread_release(self);
    return st;
}

/* perf_event_open kills: the perf trigger is never tried, the thread gets
 * the CPU timer, and the stats say perf was refused with EPERM. */
static void kill_perf_event_open(void)
{
    tu_need_perf_event(); /* else perf is refused anyway: nothing to show */
    tu_seccomp_install(__NR_perf_event_open, -1, SECCOMP_RET_KILL_PROCESS);
    snapprof_stats_t st = profile_self();
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PERF_EVENT_OPEN), 0);
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PROCESS_VM_READV), 1);
    ASSERT_UEQ(st.threads_by_trigger[SNAPPROF_TRIGGER_PERF_EVENT], 0);
    ASSERT_UEQ(st.threads_by_trigger[SNAPPROF_TRIGGER_CPU_TIMER], 1);
    ASSERT_EQ(st.trigger_fallback_from, SNAPPROF_TRIGGER_PERF_EVENT);
    ASSERT_EQ(st.trigger_fallback_errno, EPERM);
}

/* process_vm_readv kills: the checked reads take their refused paths (the
 * CFI engine reads the validated ranges directly, a readable copy says
 * "refused"), and the profile is still unwound. */
static void kill_process_vm_readv(void)
{
    tu_seccomp_install(__NR_process_vm_readv, -1, SECCOMP_RET_KILL_PROCESS);
    snapprof_stats_t st = profile_self();
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PROCESS_VM_READV), 0);
    ASSERT_GE(st.samples, 50);
    uint8_t src[64] = {1, 2, 3}, dst[64];
    ASSERT_EQ(snapprof__copy_readable(dst, (uintptr_t)src, sizeof src), -1);
    struct iovec local = {dst, 8}, remote = {src, 8};
    errno = 0;
    ASSERT_EQ(snapprof__process_vm_readv(getpid(), &local, 1, &remote, 1), -1);
    ASSERT_EQ(errno, EPERM);
}

/* Both killed at once. */
static void kill_both(void)
{
    tu_need_perf_event();
    tu_seccomp_install(__NR_perf_event_open, __NR_process_vm_readv, SECCOMP_RET_KILL_PROCESS);
    snapprof_stats_t st = profile_self();
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PERF_EVENT_OPEN), 0);
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PROCESS_VM_READV), 0);
    ASSERT_UEQ(st.threads_by_trigger[SNAPPROF_TRIGGER_CPU_TIMER], 1);
}

/* A filter that fails the calls with an errno (Docker's default action):
 * nothing to avoid, the calls are made and their failures taken as they
 * come. */
static void errno_filter_calls_made(void)
{
    tu_need_perf_event();
    tu_seccomp_install(__NR_perf_event_open, __NR_process_vm_readv, SECCOMP_RET_ERRNO | EACCES);
    snapprof_stats_t st = profile_self();
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PERF_EVENT_OPEN), 1);
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PROCESS_VM_READV), 1);
    ASSERT_EQ(st.trigger_fallback_errno, EACCES); /* the kernel's answer, not ours */
}

static volatile sig_atomic_t g_sigsys;

static void on_sigsys(int signo)
{
    (void)signo;
    g_sigsys++;
}

/* A filter that traps (SIGSYS to the program's handler, as sandboxes that
 * emulate calls do): the probe's child runs with SIGSYS at its default, so
 * the program's handler never runs for our probe, and the call is never
 * made on the program's threads. */
static void trap_filter_handler_untouched(void)
{
    tu_need_perf_event();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigsys;
    ASSERT_OK(sigaction(SIGSYS, &sa, NULL));
    tu_seccomp_install(__NR_perf_event_open, -1, SECCOMP_RET_TRAP);
    snapprof_stats_t st = profile_self();
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PERF_EVENT_OPEN), 0);
    ASSERT_EQ(st.trigger_fallback_errno, EPERM);
    ASSERT_EQ(g_sigsys, 0);
}

/* No filter: every call made, as before. */
static void no_filter(void)
{
    snapprof__seccomp_check();
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PERF_EVENT_OPEN), 1);
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PROCESS_VM_READV), 1);
    uint8_t src[64] = {1, 2, 3}, dst[64];
    ASSERT_EQ(snapprof__copy_readable(dst, (uintptr_t)src, sizeof src), 64);
    ASSERT_EQ(dst[2], 3);
}

/* Threads started after the filter: each adds itself to the profiler and
 * burns until the profile has 30 more samples. */
static snapprof_profiler_t *g_later_profiler;

__attribute__((noinline)) void seccomp_later_thread_hot(void)
{
    snapprof_stats_t st;
    ASSERT_OK(snapprof_profiler_get_stats(g_later_profiler, &st));
    tu_burn_until(g_later_profiler, samples_of, st.samples + 30);
}

static void *later_thread(void *arg)
{
    (void)arg;
    snapprof_thread_t *t;
    ASSERT_OK(snapprof_thread_register(&t));
    ASSERT_OK(snapprof_profiler_add_thread(g_later_profiler, t));
    seccomp_later_thread_hot();
    ASSERT_OK(snapprof_profiler_remove_thread(g_later_profiler, t));
    snapprof_thread_release(t);
    return NULL;
}

/* A filter the program installs itself while a profiler runs with the perf
 * trigger (and the sampling thread reads with process_vm_readv as it
 * unwinds), on every thread (TSYNC), told to snapprof through the public
 * API: the process lives on, the threads it starts afterwards get the CPU
 * timer, reads are refused, and the profile is written. Without the two
 * calls, the first new thread's perf_event_open (or the next read) killed
 * the process with SIGSYS. */
static void installed_later_api(void)
{
    tu_need_perf_event();
    char *dir = tu_make_tmpdir("seccomp-later");
    char *path = tu_path(dir, "later.pb.gz");
    snapprof_thread_t *self;
    ASSERT_OK(snapprof_thread_register(&self));
    snapprof_params_t params = tu_params(1000000u);
    params.trigger = SNAPPROF_TRIGGER_PERF_EVENT;
    snapprof_profiler_t *p;
    ASSERT_OK(snapprof_profiler_create(&params, &self, 1, &p));
    snapprof_builder_t *b;
    ASSERT_OK(snapprof_pprof_builder_create(path, &b));
    ASSERT_OK(snapprof_profiler_add_builder(p, b));
    ASSERT_OK(snapprof_profiler_start(p));
    tu_burn_until(p, samples_of, 50);

    ASSERT_OK(snapprof_seccomp_changing());
    tu_seccomp_install(__NR_perf_event_open, __NR_process_vm_readv, SECCOMP_RET_KILL_PROCESS);
    ASSERT_EQ(snapprof_seccomp_changed(), 2);
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PERF_EVENT_OPEN), 0);
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PROCESS_VM_READV), 0);

    /* The reads the sampler, heap captures and Python frames make. */
    uint8_t src[64] = {1, 2, 3}, dst[64];
    ASSERT_EQ(snapprof__copy_readable(dst, (uintptr_t)src, sizeof src), -1);
    g_later_profiler = p;
    for (int i = 0; i < 2; i++) {
        pthread_t th;
        ASSERT_EQ(pthread_create(&th, NULL, later_thread, NULL), 0);
        ASSERT_EQ(pthread_join(th, NULL), 0);
    }
    tu_burn_until(p, samples_of, 150);
    ASSERT_OK(snapprof_profiler_stop(p));
    snapprof_stats_t st;
    ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    printf("samples %" PRIu64 ", perf %" PRIu64 ", timer %" PRIu64 "; fallback errno %d\n",
           st.samples, st.threads_by_trigger[SNAPPROF_TRIGGER_PERF_EVENT],
           st.threads_by_trigger[SNAPPROF_TRIGGER_CPU_TIMER], st.trigger_fallback_errno);
    ASSERT_UEQ(st.threads_by_trigger[SNAPPROF_TRIGGER_PERF_EVENT], 1); /* armed before */
    ASSERT_UEQ(st.threads_by_trigger[SNAPPROF_TRIGGER_CPU_TIMER], 2);
    ASSERT_EQ(st.trigger_fallback_errno, EPERM);
    snapprof_profiler_destroy(p);
    snapprof_thread_release(self);
    ASSERT(tu_top_value(path, "", "seccomp_later_thread_hot", TU_TOP_CUM, 0, 1) > 0);
    unlink(path);
    rmdir(dir);
    free(path);
    free(dir);
}

/* The API with no filter: nothing to give up, and the calls held back by
 * snapprof_seccomp_changing() are made again after
 * snapprof_seccomp_changed(); a changed() with no changing() before it
 * ends nothing. */
static void api_no_filter(void)
{
    ASSERT_OK(snapprof_seccomp_changing());
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PERF_EVENT_OPEN), 0);
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PROCESS_VM_READV), 0);
    ASSERT_OK(snapprof_seccomp_changing()); /* nested */
    ASSERT_EQ(snapprof_seccomp_changed(), 0);
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PROCESS_VM_READV), 0);
    ASSERT_EQ(snapprof_seccomp_changed(), 0);
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PERF_EVENT_OPEN), 1);
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PROCESS_VM_READV), 1);
    ASSERT_EQ(snapprof_seccomp_changed(), 0);
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PROCESS_VM_READV), 1);
}

/* close_range kills (common/fd_private.h): the thread with an fd table
 * of its own is never made; the library's moment files are opened on the
 * caller, as before, and the stats say why and how often. */
static void kill_close_range(void)
{
    snapprof__fd_private_set_enabled(1); /* off by default */
    tu_seccomp_install(__NR_close_range, -1, SECCOMP_RET_KILL_PROCESS);
    snapprof_stats_t st = profile_self();
    ASSERT_EQ(snapprof__seccomp_allowed(SNAPPROF__SECCOMP_CLOSE_RANGE), 0);
    ASSERT_GE(st.samples, 50);
    char buf[64];
    ASSERT_GT(snapprof__proc_task_read(getpid(), "stat", buf, sizeof buf), 0);
    ASSERT_EQ(snapprof__fd_private_errno(), EPERM);
    ASSERT_GT(snapprof__fd_private_inline_calls(), 0);
    printf("fds_private_errno %d, %" PRIu64 " reads on the caller\n", snapprof__fd_private_errno(),
           snapprof__fd_private_inline_calls());
}

static const test_case_t cases[] = {
    {"kill_perf_event_open", kill_perf_event_open},
    {"kill_process_vm_readv", kill_process_vm_readv},
    {"kill_both", kill_both},
    {"errno_filter_calls_made", errno_filter_calls_made},
    {"trap_filter_handler_untouched", trap_filter_handler_untouched},
    {"no_filter", no_filter},
    {"installed_later_api", installed_later_api},
    {"api_no_filter", api_no_filter},
    {"kill_close_range", kill_close_range},
};

int main(int argc, char **argv)
{
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
