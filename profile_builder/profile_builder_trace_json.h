/* The trace builder's JSON text: made in memory, or streamed to a file in
 * chunks, with the string and time forms the Trace Event Format wants.
 * Internal to profile_builder/ (profile_builder_trace*.c). */
#ifndef SNAPPROF_PROFILE_BUILDER_TRACE_JSON_H
#define SNAPPROF_PROFILE_BUILDER_TRACE_JSON_H

#include <stddef.h>
#include <stdint.h>

/* Text being made: in memory (fd < 0), or streamed to fd in chunks so a
 * long profile never needs its whole file in memory. */
typedef struct text {
    char *p;
    size_t len, cap;
    int err;
    int fd;
} snapprof__json_text_t;

#define TEXT_FLUSH_AT ((size_t)256 * 1024)

/* Writes what t holds to its file (fd >= 0) and empties it; the first
 * failure stays in t->err. */
void snapprof__json_flush(snapprof__json_text_t *t);
/* Appends n bytes of s, flushing past TEXT_FLUSH_AT when streaming. */
void snapprof__json_put(snapprof__json_text_t *t, const char *s, size_t n);
void snapprof__json_puts(snapprof__json_text_t *t, const char *s);
void snapprof__json_printf(snapprof__json_text_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A JSON string: quotes, escapes, and '?' for bytes that are not UTF-8. */
void snapprof__json_str(snapprof__json_text_t *t, const char *s);
/* ns as microseconds, exact to the nanosecond. */
void snapprof__json_us(snapprof__json_text_t *t, uint64_t ns);

#endif
