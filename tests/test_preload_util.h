/* Helpers for the preload, `snapprof record` and gperftools tests: running
 * a command line and checking a profile through `go tool pprof`. */
#ifndef SNAPPROF_TESTS_TEST_PRELOAD_UTIL_H
#define SNAPPROF_TESTS_TEST_PRELOAD_UTIL_H

#include "test.h"
#include "test_util.h"

/* Runs a printf-formatted shell command (stdout and stderr together);
 * stores its exit status in *status. The output is malloc'd. */
char *pl_run(int *status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* pl_run, and the test fails unless the command's status is 0. */
char *pl_run_ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Exits 77 with a reason when LD_PRELOAD of our (sanitized) library into
 * another program cannot work: a sanitizer runtime must load first. */
void pl_skip_if_sanitized(void);

/* Fails unless the profile's -top (by sample count) has fn with at least
 * min samples; extra is more pprof flags (e.g. -tagfocus=...), may be "".
 * The preload tests mostly ask for 1: that the function is in the right
 * file is the point, and counts measure the machine (a loaded 2-core VM
 * once gave a forked child 2 samples for 300 ms of work at 1 kHz). */
void pl_require_fn(const char *profile, const char *extra, const char *fn, double min);

/* Like pl_require_fn, but counts samples with fn anywhere in their stack
 * (the -top cum column). For programs ended by a signal: a sample taken
 * while the profile is being written shows the signal handler on top of
 * fn, and on a starved machine that may be the only one. */
void pl_require_under(const char *profile, const char *fn, double min);

/* The row fn in the profile's -top by sample count, or 0 samples. */
double pl_samples_of(const char *profile, const char *extra, const char *fn);

/* Makes a fresh directory under $TMPDIR for the test (tu_make_tmpdir) and
 * stores its path in dir[0..size). */
void pl_make_dir(char *dir, size_t size, const char *tag);

/* The test's directory, made fresh by pl_setup(tag) (pl_make_dir). */
extern char pl_dir[512];
void pl_setup(const char *tag);

/* "dir/name", in one of four static buffers that take turns (so that a
 * call can use up to four at once). */
char *pl_path(const char *dir, const char *name);

/* 1 when path exists. */
int pl_exists(const char *path);

/* Counts files in dir whose name starts with prefix. */
int pl_count_prefix(const char *dir, const char *prefix);

/* Fails unless text contains needle exactly count times. */
void pl_require_count(const char *text, const char *needle, int count);

#endif
