/* The heap hooks preloaded into real programs (preload_heap/,
 * tests/preload_heap.cmake): the programs' own tallies against what the
 * test consumer was told. */
#include "test_preload_util.h"

static char *run(int *status, const char *preload, const char *prog, const char *mode)
{
    pl_skip_if_sanitized();
    return pl_run(status, "LD_PRELOAD='%s' '%s' %s 2>&1", preload, prog, mode);
}

static void require_ok(const char *preload, const char *prog, const char *mode, const char *ok_line)
{
    int status;
    char *out = run(&status, preload, prog, mode);
    ASSERT_EQ(status, 0);
    ASSERT_CONTAINS(out, ok_line);
    free(out);
}

/* Every C function noted once with the size asked for; errno, usable
 * sizes, failures as without us. */
static void test_c_functions(void)
{
    int status;
    char *out = run(&status, HEAP_LIB " " HEAP_CONSUMER, HEAP_PROG, "api");
    ASSERT_EQ(status, 0);
    ASSERT_CONTAINS(out, "malloc from: " HEAP_LIB);
    ASSERT_CONTAINS(out, "consumer: yes");
    ASSERT_CONTAINS(out, "as made");
    ASSERT_CONTAINS(out, "ok api");
    free(out);
}

/* The same program with the consumer but without the hooks fails its
 * tally: the counts above are the hooks' doing. */
static void test_counts_need_hooks(void)
{
    int status;
    char *out = run(&status, HEAP_CONSUMER, HEAP_PROG, "api");
    ASSERT_NE(status, 0);
    ASSERT_CONTAINS(out, "the consumer was told 0 allocations");
    free(out);
}

/* Neither entry point defined anywhere: the hooks only forward, and every
 * call behaves as the allocator's own. */
static void test_no_sampler(void)
{
    int status;
    char *out = run(&status, HEAP_LIB, HEAP_PROG, "api");
    ASSERT_EQ(status, 0);
    ASSERT_CONTAINS(out, "malloc from: " HEAP_LIB);
    ASSERT_CONTAINS(out, "consumer: no");
    ASSERT_CONTAINS(out, "ok api");
    free(out);
    require_ok(HEAP_LIB, HEAP_PROG, "threads", "ok threads");
    require_ok(HEAP_LIB, HEAP_PROG_CXX, "", "ok cxx");
}

/* operator new/delete, every family, noted once each. */
static void test_cxx_operators(void)
{
    int status;
    char *out = run(&status, HEAP_LIB " " HEAP_CONSUMER, HEAP_PROG_CXX, "");
    ASSERT_EQ(status, 0);
    ASSERT_CONTAINS(out, "consumer: yes");
    ASSERT_CONTAINS(out, "as made");
    ASSERT_CONTAINS(out, "ok cxx");
    free(out);
}

/* Allocations before main, and before the hooks' own constructor. */
static void test_bootstrap(void)
{
    int status;
    char *out = run(&status, HEAP_LIB " " HEAP_CONSUMER " " HEAP_EARLY, HEAP_PROG, "boot");
    ASSERT_EQ(status, 0);
    ASSERT_CONTAINS(out, "consumer: yes");
    ASSERT_CONTAINS(out, "ok boot");
    free(out);
}

/* The same when dlsym allocates while the hooks resolve the allocator:
 * those allocations come from the bootstrap buffer, are never noted, and
 * their frees are ignored. */
static void test_bootstrap_dlsym_allocates(void)
{
    int status;
    char *out =
        run(&status, HEAP_LIB " " HEAP_CONSUMER " " HEAP_DLSYM " " HEAP_EARLY, HEAP_PROG, "boot");
    ASSERT_EQ(status, 0);
    ASSERT_CONTAINS(out, "ok boot");
    ASSERT_CONTAINS(out, "freed a block of the bootstrap buffer");
    const char *b = strstr(out, "bootstrap buffer: ");
    ASSERT_NOT_NULL(b);
    ASSERT_GT(strtol(b + strlen("bootstrap buffer: "), NULL, 10), 0);
    free(out);
}

/* 8 threads, cross-thread frees, blocks outliving their threads, frees in
 * TLS destructors, a fork with allocating atfork handlers. */
static void test_threads_fork(void)
{
    require_ok(HEAP_LIB " " HEAP_CONSUMER, HEAP_PROG, "threads", "as made");
}

/* The fast path against a stand-in sampler that attaches as libsnapprof.so
 * does, with a fixed countdown (test_preload_heap_fast_prog.c says what is
 * checked): a thread's first allocation and each crossing reach the slow
 * path and nothing else does, a countdown is drawn afresh after a sample
 * and for a new gen, and exactly the frees of sampled blocks are told. */
static void test_fast_path(void)
{
    require_ok(HEAP_LIB " " HEAP_ATTACH, HEAP_FAST_PROG, "", "ok fast");
}

static const test_case_t cases[] = {
    {"c_functions", test_c_functions},
    {"counts_need_hooks", test_counts_need_hooks},
    {"no_sampler", test_no_sampler},
    {"cxx_operators", test_cxx_operators},
    {"bootstrap", test_bootstrap},
    {"bootstrap_dlsym_allocates", test_bootstrap_dlsym_allocates},
    {"threads_fork", test_threads_fork},
    {"fast_path", test_fast_path},
};

int main(int argc, char **argv)
{
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
