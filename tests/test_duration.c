/* The one grammar of durations (common/duration.h): whole seconds,
 * minutes or hours, "60", "60s", "5m", "1h", bounded; and its users'
 * bounds and messages: snapprof__parse_loop() (record --loop and
 * --flight, SNAPPROF_LOOP, SNAPPROF_FLIGHT; ?since= in cli/snapprof_http.c
 * takes 1 s to 24 h of the same grammar). */
#include "common/duration.h"
#include "preload/preload_config.h"
#include "test.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define YEAR_S 31536000u

static uint64_t parsed(const char *s)
{
    uint64_t v = 12345;
    int rc = snapprof__parse_whole_duration(s, 1, YEAR_S, &v);
    if (rc != 0)
        TEST_FAIL("'%s': %d, not accepted", s, rc);
    return v;
}

/* Every form the docs, the README and --help show, and the others of the
 * grammar. */
static void test_accepts(void)
{
    ASSERT_UEQ(parsed("60"), 60);
    ASSERT_UEQ(parsed("60s"), 60);
    ASSERT_UEQ(parsed("1s"), 1);
    ASSERT_UEQ(parsed("10s"), 10);
    ASSERT_UEQ(parsed("5m"), 300);
    ASSERT_UEQ(parsed("1h"), 3600);
    ASSERT_UEQ(parsed("24h"), 86400);
    ASSERT_UEQ(parsed("007m"), 420);
    ASSERT_UEQ(parsed("8760h"), YEAR_S);
    ASSERT_UEQ(parsed("0000000001"), 1); /* SNAPPROF_DURATION_DIGITS_MAX digits */
}

/* Not a duration: -EINVAL and *out untouched. The strtod forms that
 * --loop took before this grammar are here: a sign, a fraction, an
 * exponent, hex, white space, inf. */
static void test_rejects(void)
{
    static const char *const bad[] = {
        "",
        "s",
        "m",
        "+60",
        "-1",
        "-1s",
        "1.5m",
        "0.5h",
        "90.0s",
        "1e3",
        "1e3s",
        "0x3c",
        " 60",
        "60 ",
        "60 s",
        "inf",
        "nan",
        "60S",
        "5M",
        "1d",
        "1ms",
        "60ss",
        "5m1s",
        "1h30m",
        "abc",
        "10x",
        "60s\n",
        "00000000001" /* 11 digits */,
        "99999999999h",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 12345;
        int rc = snapprof__parse_whole_duration(bad[i], 1, YEAR_S, &v);
        if (rc != -EINVAL)
            TEST_FAIL("'%s': %d, not -EINVAL", bad[i], rc);
        ASSERT_UEQ(v, 12345);
    }
    uint64_t v = 12345;
    ASSERT_EQ(snapprof__parse_whole_duration(NULL, 1, YEAR_S, &v), -EINVAL);
    ASSERT_UEQ(v, 12345);
}

/* A duration outside [min_s, max_s] is -ERANGE, checked after the unit:
 * 24h is in ?since='s bounds, 1441m and 86401 are not; the largest the
 * digits allow does not wrap around. */
static void test_bounds(void)
{
    uint64_t v = 12345;
    ASSERT_EQ(snapprof__parse_whole_duration("0", 1, 86400, &v), -ERANGE);
    ASSERT_EQ(snapprof__parse_whole_duration("0h", 1, 86400, &v), -ERANGE);
    ASSERT_EQ(snapprof__parse_whole_duration("86401", 1, 86400, &v), -ERANGE);
    ASSERT_EQ(snapprof__parse_whole_duration("1441m", 1, 86400, &v), -ERANGE);
    ASSERT_EQ(snapprof__parse_whole_duration("25h", 1, 86400, &v), -ERANGE);
    ASSERT_UEQ(v, 12345);
    ASSERT_EQ(snapprof__parse_whole_duration("9999999999h", 1, UINT64_MAX, &v), 0);
    ASSERT_UEQ(v, 9999999999ull * 3600);
    ASSERT_EQ(snapprof__parse_whole_duration("1440m", 1, 86400, &v), 0);
    ASSERT_UEQ(v, 86400);
}

/* snapprof__parse_loop: the grammar, 1 s to a year, in ns, and a reason
 * that says which of the two was wrong. */
static void test_loop(void)
{
    char why[256];
    uint64_t ns = 0;
    ASSERT_EQ(snapprof__parse_loop("10s", &ns, why, sizeof why), 0);
    ASSERT_UEQ(ns, 10000000000ull);
    ASSERT_EQ(snapprof__parse_loop("5m", &ns, why, sizeof why), 0);
    ASSERT_UEQ(ns, 300000000000ull);
    ASSERT_EQ(snapprof__parse_loop("1h", &ns, why, sizeof why), 0);
    ASSERT_UEQ(ns, 3600000000000ull);
    ASSERT_EQ(snapprof__parse_loop("1.5m", &ns, why, sizeof why), -1);
    ASSERT_STR_EQ(why, "'1.5m' is not an interval (60s, 5m, 1h)");
    ASSERT_EQ(snapprof__parse_loop("1e3", &ns, why, sizeof why), -1);
    ASSERT_STR_EQ(why, "'1e3' is not an interval (60s, 5m, 1h)");
    ASSERT_EQ(snapprof__parse_loop("+60", &ns, why, sizeof why), -1);
    ASSERT_STR_EQ(why, "'+60' is not an interval (60s, 5m, 1h)");
    ASSERT_EQ(snapprof__parse_loop(NULL, &ns, why, sizeof why), -1);
    ASSERT_STR_EQ(why, "'' is not an interval (60s, 5m, 1h)");
    ASSERT_EQ(snapprof__parse_loop("0", &ns, why, sizeof why), -1);
    ASSERT_STR_EQ(why, "0 is out of range (1 s to 31536000 s: files are named to the second)");
    ASSERT_EQ(snapprof__parse_loop("8761h", &ns, why, sizeof why), -1);
    ASSERT_CONTAINS(why, "is out of range");
    ASSERT_UEQ(ns, 3600000000000ull);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"accepts", test_accepts},
        {"rejects", test_rejects},
        {"bounds", test_bounds},
        {"loop", test_loop},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
