/* The trace builder's JSON text (profile_builder_trace_json.h): appending,
 * streaming to the output file in chunks, JSON strings and microsecond
 * times. */
#include "profile_builder/profile_builder_trace_json.h"

#include "profile_builder/profile_builder_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void snapprof__json_flush(snapprof__json_text_t *t)
{
    if (t->err == 0 && t->fd >= 0 && t->len > 0) {
        t->err = snapprof__output_write_all(t->fd, t->p, t->len);
        t->len = 0;
    }
}

void snapprof__json_put(snapprof__json_text_t *t, const char *s, size_t n)
{
    if (t->err)
        return;
    if (t->fd >= 0 && t->len + n > TEXT_FLUSH_AT)
        snapprof__json_flush(t);
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *p = realloc(t->p, cap);
        if (p == NULL) {
            t->err = -ENOMEM;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

void snapprof__json_puts(snapprof__json_text_t *t, const char *s)
{
    snapprof__json_put(t, s, strlen(s));
}

void snapprof__json_printf(snapprof__json_text_t *t, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        snapprof__json_put(t, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* Length of the valid UTF-8 sequence at s, or 0. */
static size_t utf8_len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    size_t n = (s[0] & 0xe0) == 0xc0   ? 2
               : (s[0] & 0xf0) == 0xe0 ? 3
               : (s[0] & 0xf8) == 0xf0 ? 4
                                       : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

/* A JSON string: quotes, escapes, and '?' for bytes that are not UTF-8
 * (JSON readers reject them). */
void snapprof__json_str(snapprof__json_text_t *t, const char *s)
{
    snapprof__json_put(t, "\"", 1);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            snapprof__json_put(t, e, 2);
            p++;
        } else if (*p < 0x20) {
            snapprof__json_printf(t, "\\u%04x", *p);
            p++;
        } else {
            size_t n = utf8_len(p);
            if (n == 0) {
                snapprof__json_put(t, "?", 1);
                p++;
            } else {
                snapprof__json_put(t, (const char *)p, n);
                p += n;
            }
        }
    }
    snapprof__json_put(t, "\"", 1);
}

/* Microseconds since the profile started, exact to the nanosecond. */
void snapprof__json_us(snapprof__json_text_t *t, uint64_t ns)
{
    snapprof__json_printf(t, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}
