/* The library calls the preload library needed: snapprof_profiler_flush,
 * snapprof_pprof_builder_set_path and snapprof_builder_set_path,
 * snapprof_thread_update_name, and thread
 * registration in the child of a fork() made by a thread that is not
 * main. */
#include "test_preload_util.h"

#include "stack_copier/stack_copier.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) void api_hot(uint64_t units)
{
    volatile uint64_t x = 1;
    for (uint64_t i = 0; i < units * 300000u; i++)
        x = x * 6364136223846793005u + 1442695040888963407u;
}

__attribute__((noinline)) void api_later(uint64_t units)
{
    volatile uint64_t x = 1;
    for (uint64_t i = 0; i < units * 300000u; i++)
        x = x * 6364136223846793005u + 1442695040888963407u;
}

static snapprof_trigger_t g_trigger = SNAPPROF_TRIGGER_HANDSHAKE;

static snapprof_profiler_t *make_profiler(snapprof_thread_t *t, const char *path,
                                          snapprof_builder_t **pprof)
{
    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = 1000000u;
    params.trigger = g_trigger;
    snapprof_profiler_t *p;
    ASSERT_OK(snapprof_profiler_create(&params, &t, 1, &p));
    ASSERT_OK(snapprof_pprof_builder_create(path, pprof));
    ASSERT_OK(snapprof_profiler_add_builder(p, *pprof));
    return p;
}

/* Burns in fn until the profiler holds at least n more samples. */
static void burn_until(snapprof_profiler_t *p, void (*fn)(uint64_t), uint64_t n)
{
    snapprof_stats_t st;
    ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    uint64_t want = st.samples + n;
    do {
        fn(10);
        ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    } while (st.samples < want);
}

/* A flush writes everything so far; sampling goes on; stop writes all. */
static void test_flush_while_running(void)
{
    char *dir = tu_make_tmpdir("api-flush");
    char path[600], copy[700];
    snprintf(path, sizeof path, "%s/f.pb.gz", dir);
    snprintf(copy, sizeof copy, "%s/flushed.pb.gz", dir);
    snapprof_thread_t *me;
    ASSERT_OK(snapprof_thread_register(&me));
    snapprof_builder_t *b;
    snapprof_profiler_t *p = make_profiler(me, path, &b);
    ASSERT_EQ(snapprof_profiler_flush(p), SNAPPROF_ESTATE); /* not started */
    ASSERT_OK(snapprof_profiler_start(p));
    burn_until(p, api_hot, 50);
    ASSERT_OK(snapprof_profiler_flush(p));
    ASSERT_EQ(link(path, copy), 0);
    burn_until(p, api_later, 50);
    ASSERT_OK(snapprof_profiler_stop(p));
    ASSERT_OK(snapprof_profiler_flush(p)); /* once more after stop: fine */
    pl_require_fn(copy, "", "api_hot", 20);
    ASSERT_EQ(pl_samples_of(copy, "", "api_later"), 0);
    pl_require_fn(path, "", "api_hot", 20);
    pl_require_fn(path, "", "api_later", 20);
    snapprof_profiler_destroy(p);
    snapprof_thread_release(me);
    free(dir);
}

/* The directory vanished before the write: stop fails, set_path and flush
 * write the same samples elsewhere. */
static void test_set_path_after_failed_write(void)
{
    char *dir = tu_make_tmpdir("api-setpath");
    char sub[600], path[700], alt[700];
    snprintf(sub, sizeof sub, "%s/gone", dir);
    snprintf(path, sizeof path, "%s/x.pb.gz", sub);
    snprintf(alt, sizeof alt, "%s/y.pb.gz", dir);
    ASSERT_EQ(mkdir(sub, 0755), 0);
    snapprof_thread_t *me;
    ASSERT_OK(snapprof_thread_register(&me));
    snapprof_builder_t *b;
    snapprof_profiler_t *p = make_profiler(me, path, &b);
    ASSERT_OK(snapprof_profiler_start(p));
    burn_until(p, api_hot, 50);
    ASSERT_EQ(rmdir(sub), 0);
    ASSERT_EQ(snapprof_profiler_stop(p), -ENOENT);
    /* A bad path is refused and changes nothing. */
    ASSERT_EQ(snapprof_pprof_builder_set_path(b, "/nonexistent-dir/z.pb.gz"), -ENOENT);
    ASSERT_OK(snapprof_pprof_builder_set_path(b, alt));
    ASSERT_OK(snapprof_profiler_flush(p));
    pl_require_fn(alt, "", "api_hot", 20);
    /* Only pprof builders have a path. */
    tu_collector_t c;
    memset(&c, 0, sizeof c);
    snapprof_builder_t *other = tu_collector_builder(&c);
    ASSERT_EQ(snapprof_pprof_builder_set_path(other, alt), -EINVAL);
    ASSERT_EQ(snapprof_pprof_builder_set_path(NULL, alt), -EINVAL);
    snapprof_builder_destroy(other);
    tu_collector_free(&c);
    snapprof_profiler_destroy(p);
    snapprof_thread_release(me);
    free(dir);
}

static char *slurp(const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cat '%s'", path);
    int st;
    char *text = tu_run(cmd, &st);
    ASSERT_EQ(st, 0);
    return text;
}

/* A run that writes folded stacks and trace events loses neither to a
 * directory that vanished: both builders move, and one flush writes both.
 * A builder that writes no file of its own has no path to move. */
static void test_set_path_any_builder(void)
{
    char *dir = tu_make_tmpdir("api-setpath-any");
    char sub[600], folded[700], trace[700], alt_folded[700], alt_trace[700];
    snprintf(sub, sizeof sub, "%s/gone", dir);
    snprintf(folded, sizeof folded, "%s/x.folded", sub);
    snprintf(trace, sizeof trace, "%s/x.json", sub);
    snprintf(alt_folded, sizeof alt_folded, "%s/y.folded", dir);
    snprintf(alt_trace, sizeof alt_trace, "%s/y.json", dir);
    ASSERT_EQ(mkdir(sub, 0755), 0);
    snapprof_thread_t *me;
    snapprof_profiler_t *p = tu_profile_self(&me);
    snapprof_builder_t *fb, *tb;
    ASSERT_OK(snapprof_folded_builder_create(folded, &fb));
    ASSERT_OK(snapprof_trace_builder_create(trace, &tb));
    ASSERT_OK(snapprof_profiler_add_builder(p, fb));
    ASSERT_OK(snapprof_profiler_add_builder(p, tb));
    ASSERT_OK(snapprof_profiler_start(p));
    burn_until(p, api_hot, 20);
    ASSERT_EQ(rmdir(sub), 0);
    ASSERT_EQ(snapprof_profiler_stop(p), -ENOENT);
    ASSERT_EQ(snapprof_builder_set_path(fb, "/nonexistent-dir/z.folded"), -ENOENT);
    ASSERT_OK(snapprof_builder_set_path(fb, alt_folded));
    ASSERT_OK(snapprof_builder_set_path(tb, alt_trace));
    /* pprof's own call still refuses the others. */
    ASSERT_EQ(snapprof_pprof_builder_set_path(fb, alt_folded), -EINVAL);
    ASSERT_OK(snapprof_profiler_flush(p));
    char *text = slurp(alt_folded);
    ASSERT_CONTAINS(text, ";api_hot ");
    free(text);
    text = slurp(alt_trace);
    ASSERT_CONTAINS(text, "\"name\":\"api_hot\"");
    free(text);
    tu_collector_t c;
    memset(&c, 0, sizeof c);
    snapprof_builder_t *other = tu_collector_builder(&c);
    ASSERT_EQ(snapprof_builder_set_path(other, alt_folded), -EINVAL);
    ASSERT_EQ(snapprof_builder_set_path(NULL, alt_folded), -EINVAL);
    snapprof_builder_destroy(other);
    tu_collector_free(&c);
    snapprof_profiler_destroy(p);
    snapprof_thread_release(me);
    unlink(alt_folded);
    unlink(alt_trace);
    rmdir(dir);
    free(dir);
}

/* Samples after a rename carry the new name. */
static void test_thread_update_name(void)
{
    char *dir = tu_make_tmpdir("api-rename");
    char path[600];
    snprintf(path, sizeof path, "%s/n.pb.gz", dir);
    pthread_setname_np(pthread_self(), "before-rename");
    snapprof_thread_t *me;
    ASSERT_OK(snapprof_thread_register(&me));
    snapprof_builder_t *b;
    snapprof_profiler_t *p = make_profiler(me, path, &b);
    ASSERT_OK(snapprof_profiler_start(p));
    burn_until(p, api_hot, 30);
    ASSERT_OK(snapprof_thread_update_name(me, "after-rename-and-cut-to-15"));
    burn_until(p, api_later, 30);
    ASSERT_OK(snapprof_profiler_stop(p));
    ASSERT_EQ(snapprof_thread_update_name(NULL, "x"), -EINVAL);
    pl_require_fn(path, "-tagfocus=thread_name=^before-rename$", "api_hot", 20);
    pl_require_fn(path, "-tagfocus=thread_name=^after-rename-an$", "api_later", 20);
    ASSERT_EQ(pl_samples_of(path, "-tagfocus=thread_name=^after-rename-an$", "api_hot"), 0);
    snapprof_profiler_destroy(p);
    snapprof_thread_release(me);
    free(dir);
}

/* The same with the perf trigger, whose captures wait in their slots for
 * the sampling thread: one taken before the rename must still carry the
 * old name (it got the new one, read at delivery, before the rename
 * drained the slots). */
static void test_thread_update_name_perf(void)
{
    tu_need_perf_event();
    g_trigger = SNAPPROF_TRIGGER_PERF_EVENT;
    test_thread_update_name();
}

/* In the child of a fork() made by a thread that is not main: the child's
 * only thread has tid == pid but runs on that thread's stack. Its own
 * registration must give it a fresh token with the right bounds, and
 * sampling it must work. */
static void *fork_from_thread(void *arg)
{
    (void)arg;
    snapprof_thread_t *parent_token;
    ASSERT_OK(snapprof_thread_register(&parent_token));
    pid_t pid = fork();
    if (pid == 0) {
        snapprof_thread_t *t;
        int local = 0;
        if (snapprof_thread_register(&t) != 0)
            _exit(10);
        if (t == parent_token || snapprof_thread_tid(t) != getpid())
            _exit(11);
        uintptr_t here = (uintptr_t)&local;
        if (here < t->stack_low || here >= t->stack_base)
            _exit(12);
        tu_collector_t c;
        memset(&c, 0, sizeof c);
        snapprof_params_t params;
        snapprof_params_init(&params);
        params.interval_ns = 1000000u;
        snapprof_profiler_t *p;
        if (snapprof_profiler_create(&params, &t, 1, &p) != 0 ||
            snapprof_profiler_add_builder(p, tu_collector_builder(&c)) != 0 ||
            snapprof_profiler_start(p) != 0)
            _exit(13);
        snapprof_stats_t st;
        do {
            api_hot(10);
            snapprof_profiler_get_stats(p, &st);
        } while (st.samples < 20 && st.failed_total < 20);
        snapprof_profiler_stop(p);
        _exit(st.failed[SNAPPROF_FAIL_SP_OUT_OF_RANGE] != 0 ? 14 : st.samples < 20 ? 15 : 0);
    }
    int status;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    snapprof_thread_release(parent_token);
    return (void *)(intptr_t)(WIFEXITED(status) ? WEXITSTATUS(status) : 99);
}

static void test_register_in_fork_child(void)
{
    tu_skip_under_tsan("TSan cannot start threads in the child of a multi-threaded fork()");
    pthread_t th;
    void *ret;
    ASSERT_EQ(pthread_create(&th, NULL, fork_from_thread, NULL), 0);
    ASSERT_EQ(pthread_join(th, &ret), 0);
    ASSERT_EQ((int)(intptr_t)ret, 0);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"flush_while_running", test_flush_while_running},
        {"set_path_after_failed_write", test_set_path_after_failed_write},
        {"set_path_any_builder", test_set_path_any_builder},
        {"thread_update_name", test_thread_update_name},
        {"thread_update_name_perf", test_thread_update_name_perf},
        {"register_in_fork_child", test_register_in_fork_child},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
