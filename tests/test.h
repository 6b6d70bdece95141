/* Typed assertions for snapprof's tests, in the manner of libuv's test/task.h.
 * A failed assertion prints where and what, and exits 1. */
#ifndef SNAPPROF_TESTS_TEST_H
#define SNAPPROF_TESTS_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_SKIP 77

#define TEST_FAIL(...)                                                                             \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
    } while (0)

#define ASSERT(expr)                                                                               \
    do {                                                                                           \
        if (!(expr))                                                                               \
            TEST_FAIL("assertion failed: %s", #expr);                                              \
    } while (0)

#define ASSERT_CMP_(a, op, b, fmt, type)                                                           \
    do {                                                                                           \
        type a_ = (type)(a);                                                                       \
        type b_ = (type)(b);                                                                       \
        if (!(a_ op b_))                                                                           \
            TEST_FAIL("assertion failed: %s %s %s (" fmt " vs " fmt ")", #a, #op, #b, a_, b_);     \
    } while (0)

#define ASSERT_EQ(a, b) ASSERT_CMP_(a, ==, b, "%" PRId64, int64_t)
#define ASSERT_NE(a, b) ASSERT_CMP_(a, !=, b, "%" PRId64, int64_t)
#define ASSERT_LT(a, b) ASSERT_CMP_(a, <, b, "%" PRId64, int64_t)
#define ASSERT_LE(a, b) ASSERT_CMP_(a, <=, b, "%" PRId64, int64_t)
#define ASSERT_GT(a, b) ASSERT_CMP_(a, >, b, "%" PRId64, int64_t)
#define ASSERT_GE(a, b) ASSERT_CMP_(a, >=, b, "%" PRId64, int64_t)
#define ASSERT_UEQ(a, b) ASSERT_CMP_(a, ==, b, "%" PRIu64, uint64_t)
#define ASSERT_PTR_EQ(a, b) ASSERT_CMP_(a, ==, b, "%p", const void *)
#define ASSERT_PTR_NE(a, b) ASSERT_CMP_(a, !=, b, "%p", const void *)
#define ASSERT_NULL(a) ASSERT_PTR_EQ(a, NULL)
#define ASSERT_NOT_NULL(a) ASSERT_PTR_NE(a, NULL)
#define ASSERT_OK(expr)                                                                            \
    do {                                                                                           \
        int r_ = (expr);                                                                           \
        if (r_ != 0)                                                                               \
            TEST_FAIL("%s returned %d (%s)", #expr, r_, snapprof_strerror(r_));                    \
    } while (0)
#define ASSERT_STR_EQ(a, b)                                                                        \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0)                                       \
            TEST_FAIL("assertion failed: %s == %s (\"%s\" vs \"%s\")", #a, #b, a_ ? a_ : "(null)", \
                      b_ ? b_ : "(null)");                                                         \
    } while (0)
#define ASSERT_CONTAINS(haystack, needle)                                                          \
    do {                                                                                           \
        const char *h_ = (haystack), *n_ = (needle);                                               \
        if (h_ == NULL || strstr(h_, n_) == NULL)                                                  \
            TEST_FAIL("\"%s\" not found in %s:\n%s", n_, #haystack, h_ ? h_ : "(null)");           \
    } while (0)

/* Test programs name their cases in one table, the only list of them:
 * ctest learns the names from "<exe> --list" after the build
 * (snapprof_add_test_cases in CMakeLists.txt), and runs "<exe> <case>". */
typedef struct test_case {
    const char *name;
    void (*fn)(void);
} test_case_t;

/* Runs the case argv[1] names and returns main's exit status (0); an
 * unknown or missing name fails the test. "--list" prints the case names,
 * one a line, and returns 0. setup, when not NULL, runs just before the
 * case, and not for "--list": listing must leave nothing behind. Never
 * timed by -finstrument-functions (test_calls.c counts timed frames from
 * main down). */
__attribute__((no_instrument_function)) static inline int
test_run_case_setup(const test_case_t *cases, size_t count, void (*setup)(void), int argc,
                    char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    if (!strcmp(c, "--list")) {
        for (size_t i = 0; i < count; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    for (size_t i = 0; i < count; i++) {
        if (!strcmp(c, cases[i].name)) {
            if (setup != NULL)
                setup();
            cases[i].fn();
            printf("ok %s\n", c);
            return 0;
        }
    }
    TEST_FAIL("unknown case '%s'", c);
}

__attribute__((no_instrument_function)) static inline int
test_run_case(const test_case_t *cases, size_t count, int argc, char **argv)
{
    return test_run_case_setup(cases, count, NULL, argc, argv);
}

/* The main() of a test program whose cases are the table cases[], with
 * stdout line-buffered: a case that dies of a signal (an unwinder reading
 * a wild address) does not flush stdio, and what it printed up to there
 * must still reach ctest's log. The cases run by test_run_case(). */
#define TEST_MAIN_LINE_BUFFERED(cases)                                                             \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        setvbuf(stdout, NULL, _IOLBF, 0);                                                          \
        return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);                   \
    }

#endif
