/* Durations as people write them on the command line, in the environment
 * and in a URL (record --loop and --flight, SNAPPROF_LOOP and
 * SNAPPROF_FLIGHT, ?since=): one grammar for all of them. Header-only
 * (static inline), so that each program that parses one (the preload, the
 * snapprof command, the fuzzers, the tests) has it without another source
 * file to build. Internal. */
#ifndef SNAPPROF_COMMON_DURATION_H
#define SNAPPROF_COMMON_DURATION_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

/* The most digits snapprof__parse_whole_duration() reads: 10 digits of
 * hours still fit in 64 bits of seconds. */
#define SNAPPROF_DURATION_DIGITS_MAX 10

/* Parses a duration in whole seconds, minutes or hours: 1 to
 * SNAPPROF_DURATION_DIGITS_MAX decimal digits, then nothing (seconds) or
 * one of the units s, m and h (lower case), and nothing else: "60", "60s",
 * "5m", "1h". Refused: an empty string, a sign ("+60", "-1"), a fraction
 * ("1.5m"), an exponent ("1e3"), hex ("0x3c"), white space, any other
 * unit or trailing text. Returns 0 with the duration in seconds in *out_s
 * (untouched otherwise), -EINVAL when s (or NULL) is not a duration,
 * -ERANGE when it is one but outside [min_s, max_s]. Any thread; reads
 * only s. */
static inline int snapprof__parse_whole_duration(const char *s, uint64_t min_s, uint64_t max_s,
                                                 uint64_t *out_s)
{
    if (!s)
        return -EINVAL;
    uint64_t n = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (p - s == SNAPPROF_DURATION_DIGITS_MAX)
            return -EINVAL;
        n = n * 10 + (uint64_t)(*p - '0');
    }
    if (p == s)
        return -EINVAL;
    uint64_t unit = 1;
    if (strcmp(p, "m") == 0)
        unit = 60;
    else if (strcmp(p, "h") == 0)
        unit = 3600;
    else if (*p != '\0' && strcmp(p, "s") != 0)
        return -EINVAL;
    n *= unit;
    if (n < min_s || n > max_s)
        return -ERANGE;
    *out_s = n;
    return 0;
}

#endif
