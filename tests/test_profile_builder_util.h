/* Helpers for the profile_builder tests: drive a builder, decode and check its pprof output. */
#ifndef SNAPPROF_TESTS_TEST_PROFILE_BUILDER_UTIL_H
#define SNAPPROF_TESTS_TEST_PROFILE_BUILDER_UTIL_H

#include "profile.pb-c.h"
#include "profile_builder/profile_builder_internal.h"

#include <stddef.h>
#include <stdint.h>

/* A JIT module the tests' JIT frames point to: [jit] at 0x7f0000000000,
 * 1 MiB. */
extern const snapprof_module_t pbt_jit_module;

/* Creates a pprof builder for path; fails the test on error. */
snapprof_builder_t *pbt_create(const char *path);

/* Feeds one sample through the builder's ops; fails the test on error. */
void pbt_sample(snapprof_builder_t *b, const snapprof_sample_t *sample);

/* Feeds times samples through pbt_sample: the stack frames[0..n) (leaf
 * first) of thread tid named thread, with labels[0..n_labels) (labels may
 * be NULL), weighing cpu_ns and wall_ns each. */
void pbt_feed(snapprof_builder_t *b, const snapprof_frame_t *frames, size_t n, pid_t tid,
              const char *thread, const snapprof_label_t *labels, size_t n_labels, uint64_t cpu_ns,
              uint64_t wall_ns, int times);

/* Completes the profile through the builder's ops and returns the result
 * (the write may fail on purpose). stats may be NULL. */
int pbt_complete(snapprof_builder_t *b, snapprof_mode_t mode, const snapprof_stats_t *stats);

/* Reads a gzip-compressed profile (failing unless it starts with the gzip
 * magic) and decodes it. Free with snapprof__pprof__profile__free_unpacked(p, NULL). */
Snapprof__Pprof__Profile *pbt_load(const char *path);

/* Checks every invariant go tool pprof relies on (profile_builder/README.md
 * lists them: string_table[0] "", dense ids, the sample types in order),
 * and that the mappings' has_* flags match their locations. */
void pbt_check_valid(const Snapprof__Pprof__Profile *p);

/* The string at index i (checked). */
const char *pbt_str(const Snapprof__Pprof__Profile *p, int64_t i);

/* Look-ups by id; NULL when absent. */
const Snapprof__Pprof__Location *pbt_location(const Snapprof__Pprof__Profile *p, uint64_t id);
const Snapprof__Pprof__Function *pbt_function(const Snapprof__Pprof__Profile *p, uint64_t id);
const Snapprof__Pprof__Mapping *pbt_mapping(const Snapprof__Pprof__Profile *p, uint64_t id);

/* The name of the outermost function of a location ("" when it has no line). */
const char *pbt_location_name(const Snapprof__Pprof__Profile *p, uint64_t id);

/* The label of a sample with the given key, or NULL. */
const Snapprof__Pprof__Label *pbt_label(const Snapprof__Pprof__Profile *p,
                                        const Snapprof__Pprof__Sample *s, const char *key);

/* The hidden stats entry of a profile ("snapprof-stats/1 ..."): the last
 * string-table entry that is one, or NULL. */
const char *pbt_stats_entry(const Snapprof__Pprof__Profile *p);

/* Text that snapprof__stats_for_each writes into with pbt_text_add_stat:
 * one "key<sep>value\n" line a counter (sep is the caller's). */
typedef struct pbt_text {
    char s[8192];
    size_t len;
    const char *sep;
} pbt_text_t;

/* A snapprof__stats_for_each callback; arg is a pbt_text_t. Fails the test
 * when the text is full. */
int pbt_text_add_stat(void *arg, const char *key, const char *value);

/* Adds to st the losses the stats tests print, of every kind: failed 12
 * (thread_exited 2, timeout 10), samples_dropped 3, truncated_copy 1,
 * truncated_depth 4, unwind_aborted 5; and threads on two triggers (perf
 * 3, handshake 1). */
void pbt_add_losses(snapprof_stats_t *st);

/* Fails unless the profile's hidden entry decodes to exactly want. */
void pbt_expect_stats(const Snapprof__Pprof__Profile *p, const snapprof_stats_t *want);

/* A temporary output path "<fresh dir>/<name>" (malloc'd). */
char *pbt_tmp_path(const char *tag, const char *name);

/* Removes a file made under pbt_tmp_path(), its directory, and frees path. */
void pbt_remove(char *path);

#endif
