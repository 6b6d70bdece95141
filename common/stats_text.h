/* snapprof_stats_t as text: the one table of its counters, and every text
 * made from it. Internal; plain libc plus the public name functions
 * (snapprof_fail_reason_name, snapprof_trigger_name), so the preload
 * library and the `snapprof` command compile it too.
 *
 * What is made from the table:
 *   - the hidden entry of a pprof profile: one string-table entry that no
 *     message refers to (pprof keeps the file valid and prints nothing of
 *     it), "snapprof-stats/1 key=value key=value ...";
 *   - the summary files the preload library writes for `snapprof record`
 *     (one "key=value" line per counter);
 *   - `snapprof stats FILE`, which reads the entry back.
 * Keys are the field names of snapprof_stats_t; an array field gives one
 * key per element, "failed.<reason>" and "threads_by_trigger.<trigger>".
 * Values are decimal, except trigger_fallback_from: a trigger name, or
 * "none".
 *
 * Versioning: keys are only ever added within version 1, so a reader
 * keeps the keys it does not know and reads a key that is missing as 0.
 * The version changes when an existing key changes its meaning; a reader
 * refuses versions it does not know. */
#ifndef SNAPPROF_COMMON_STATS_TEXT_H
#define SNAPPROF_COMMON_STATS_TEXT_H

#include <snapprof/snapprof.h>

#include <stddef.h>
#include <stdint.h>

/* Every field of snapprof_stats_t, in the struct's order: XX(KIND, field).
 * Kinds: U64 (a uint64_t counter), FAIL (uint64_t[SNAPPROF_FAIL_COUNT] by
 * failure reason), TRIGGERS (uint64_t[SNAPPROF_TRIGGER_COUNT] by trigger;
 * "auto" is not a trigger a thread runs, so it has no key), TRIGGER (a
 * snapprof_trigger_t), INT (an int). stats_text.c checks at compile time
 * that the table covers the whole struct: a field added to
 * snapprof_stats_t must be added here. */
#define SNAPPROF__STATS_TABLE(XX)                                                                  \
    XX(U64, ticks)                                                                                 \
    XX(U64, ticks_missed)                                                                          \
    XX(U64, samples)                                                                               \
    XX(U64, samples_signalled)                                                                     \
    XX(U64, samples_reused)                                                                        \
    XX(U64, samples_skipped_idle)                                                                  \
    XX(FAIL, failed)                                                                               \
    XX(U64, failed_total)                                                                          \
    XX(U64, truncated_copy)                                                                        \
    XX(U64, truncated_depth)                                                                       \
    XX(U64, unwind_aborted)                                                                        \
    XX(U64, unwind_complete)                                                                       \
    XX(U64, copy_bytes_total)                                                                      \
    XX(U64, copy_bytes_max)                                                                        \
    XX(U64, pause_p50_ns)                                                                          \
    XX(U64, pause_p99_ns)                                                                          \
    XX(U64, pause_max_ns)                                                                          \
    XX(U64, roundtrip_p50_ns)                                                                      \
    XX(U64, roundtrip_p99_ns)                                                                      \
    XX(U64, unwind_p50_ns)                                                                         \
    XX(U64, unwind_p99_ns)                                                                         \
    XX(U64, sampler_cpu_ns)                                                                        \
    XX(U64, unwind_unknown)                                                                        \
    XX(U64, unwind_aborted_bad_frame)                                                              \
    XX(U64, unwind_aborted_no_info)                                                                \
    XX(U64, unwind_aborted_memory)                                                                 \
    XX(U64, unwind_aborted_truncated_copy)                                                         \
    XX(U64, unwind_aborted_other)                                                                  \
    XX(U64, unwind_frames_total)                                                                   \
    XX(U64, unwind_frames_max)                                                                     \
    XX(U64, unwind_max_ns)                                                                         \
    XX(U64, labels_skipped)                                                                        \
    XX(U64, app_frames_lost)                                                                       \
    XX(TRIGGERS, threads_by_trigger)                                                               \
    XX(TRIGGER, trigger_fallback_from)                                                             \
    XX(INT, trigger_fallback_errno)                                                                \
    XX(U64, cpu_ns_total)                                                                          \
    XX(U64, cpu_ns_sampled)                                                                        \
    XX(U64, samples_dropped)                                                                       \
    XX(U64, trigger_blocked)                                                                       \
    XX(U64, events_dropped)                                                                        \
    XX(U64, events_lost)                                                                           \
    XX(U64, samples_blocked)                                                                       \
    XX(U64, wall_copy_raced)                                                                       \
    XX(INT, wall_proc_errno)                                                                       \
    XX(U64, cfi_tables)                                                                            \
    XX(U64, cfi_table_bytes)                                                                       \
    XX(U64, cfi_table_build_ns)                                                                    \
    XX(TRIGGERS, trigger_refused)                                                                  \
    XX(U64, mmap_failed)                                                                           \
    XX(U64, wall_proc_transient)                                                                   \
    XX(U64, fds_lost)                                                                              \
    XX(U64, fds_held_max)                                                                          \
    XX(U64, foreign_stack_copies)                                                                  \
    XX(U64, handler_replaced_disarmed)                                                             \
    XX(U64, large_buffer_bytes)                                                                    \
    XX(U64, large_buffer_bytes_max)                                                                \
    XX(U64, truncated_copy_budget)                                                                 \
    XX(U64, heap_samples)                                                                          \
    XX(U64, heap_frees)                                                                            \
    XX(U64, heap_dropped_no_slot)                                                                  \
    XX(U64, heap_dropped_set_full)                                                                 \
    XX(U64, heap_dropped_no_stack)                                                                 \
    XX(U64, heap_frees_lost)                                                                       \
    XX(U64, heap_samples_no_slot)                                                                  \
    XX(U64, python_samples)                                                                        \
    XX(U64, python_frames)                                                                         \
    XX(U64, python_truncated)                                                                      \
    XX(U64, python_broken)                                                                         \
    XX(U64, python_unmatched)                                                                      \
    XX(U64, python_code_reused)                                                                    \
    XX(U64, python_layout_unknown)                                                                 \
    XX(U64, unarmed_timer_samples)                                                                 \
    XX(U64, unarmed_timer_passed)                                                                  \
    XX(U64, unarmed_timer_errno)                                                                   \
    XX(U64, heap_stack_lookups)                                                                    \
    XX(U64, python_learned_full)                                                                   \
    XX(U64, drain_budget_stops)                                                                    \
    XX(U64, drain_max_cpu_ns)                                                                      \
    XX(U64, python_read_errno)                                                                     \
    XX(U64, fds_private_errno)                                                                     \
    XX(U64, fds_private_inline)

/* The groups `snapprof stats` prints the counters in, assigned by key
 * prefix in stats_text.c (g_groups): snapprof__stats_group(i) is the name
 * of group i in the order printed (the last SNAPPROF__STATS_GROUP_OTHER),
 * NULL past the last; snapprof__stats_group_of(key) the group of a key. A
 * counter added to the table with no matching prefix goes to "other"
 * until a prefix is added there; the table above needs no group. */
#define SNAPPROF__STATS_GROUP_OTHER "other"
const char *snapprof__stats_group(int i);
const char *snapprof__stats_group_of(const char *key);

/* The hidden entry starts with this; the number is the format's version. */
#define SNAPPROF__STATS_PREFIX "snapprof-stats/"
#define SNAPPROF__STATS_VERSION 1

/* Longest key, value and comment line the functions below make. */
#define SNAPPROF__STATS_KEY_MAX 64
#define SNAPPROF__STATS_VALUE_MAX 32
#define SNAPPROF__COMMENT_MAX 320

/* At most this many comment lines (see snapprof__stats_comments). */
#define SNAPPROF__COMMENTS_MAX 4

/* Calls fn(arg, key, value) for every counter, in the table's order, with
 * the value as text; stops at the first nonzero return and returns it. */
typedef int (*snapprof__stats_pair_cb)(void *arg, const char *key, const char *value);
int snapprof__stats_for_each(const snapprof_stats_t *st, snapprof__stats_pair_cb fn, void *arg);

/* Sets the counter named key from its text. Returns 0, -ENOENT for a key
 * the table does not have, -EINVAL for a value that is not one. */
int snapprof__stats_set(snapprof_stats_t *st, const char *key, const char *value);

/* The hidden entry, "snapprof-stats/1 key=value ...", malloc'd; NULL when
 * out of memory. */
char *snapprof__stats_encode(const snapprof_stats_t *st);

/* 1 when s is a hidden entry of any version. */
int snapprof__stats_is_entry(const char *s);

/* Reads a hidden entry into *st (zeroed first, its size set). A key the table does not
 * have goes to unknown(arg, key, value) when unknown is not NULL. Returns
 * 0; -EINVAL when entry is not an entry or a value is bad; -EPROTONOSUPPORT
 * for a version other than SNAPPROF__STATS_VERSION. */
int snapprof__stats_decode(const char *entry, snapprof_stats_t *st, snapprof__stats_pair_cb unknown,
                           void *arg);

/* "98.2 Hz per CPU-second of 100 Hz requested": the delivered rate, the
 * samples counted by their weight in periods (cpu_ns_sampled / period_ns)
 * per CPU-second (cpu_ns_total / 1e9), against 1e9 / period_ns. Counted
 * one by one, a run shorter than the perf trigger's period change, whose
 * one drawn period was 0.66 of the interval, read "151.4 Hz ... of 100
 * Hz": weighed, the rate is the requested one less the CPU time no sample
 * placed, however the periods were drawn. Counters without
 * cpu_ns_sampled (older summaries) count samples. In wall mode,
 * or with no CPU time seen, only the requested rate is said; with less CPU
 * time than SNAPPROF__RATE_MIN_PERIODS periods (a rate from one or two
 * samples says nothing), the CPU time and the requested rate. */
#define SNAPPROF__RATE_MIN_PERIODS 10
void snapprof__stats_rate_text(const snapprof_stats_t *st, uint64_t period_ns, int wall, char *buf,
                               size_t size);

/* "trigger perf" (every thread ran one trigger), "triggers perf (3
 * threads), handshake (1)" (most threads first), or "" (no thread). */
void snapprof__stats_trigger_text(const snapprof_stats_t *st, char *buf, size_t size);

/* What a CPU profile where threads ran the timer trigger must say of it,
 * or NULL (no thread did, or wall mode): its samples come at the kernel's
 * tick, so its rate is capped there and code in step with the tick is
 * sampled more or less than its share. */
const char *snapprof__stats_timer_note(const snapprof_stats_t *st, int wall);

/* "failed 3 (timeout 2, thread_exited 1), samples_dropped 4,
 * truncated_copy 1, truncated_depth 2, unwind_aborted 5", the parts that
 * are not 0; "" when all are. */
void snapprof__stats_losses_text(const snapprof_stats_t *st, char *buf, size_t size);

/* The share of the threads' CPU time that no sample stands for, 0..1 (0
 * when none was seen, and when that time is under
 * SNAPPROF__UNPLACED_PERIODS sampling periods: a program that mostly
 * sleeps, with a few ms of CPU in all, has nothing worth a note). */
double snapprof__stats_unplaced_share(const snapprof_stats_t *st, uint64_t period_ns);

/* "15% of the threads' CPU time is in no sample: time in the kernel and
 * after each thread's last sample, 4 dropped captures (pprof:
 * [kernel and unsampled])": what that share is, so that it does not read as
 * a loss beside "no sample failed" (the perf trigger counts user time only;
 * a thread's time after its last sample is under one period). The
 * share has one decimal under 10%. */
void snapprof__stats_unplaced_text(const snapprof_stats_t *st, char *buf, size_t size);

/* What the summary and `snapprof stats` say when
 * snapprof__stats_losses_text() is "". */
#define SNAPPROF__STATS_NO_LOSS "no sample failed, was dropped or cut short"

/* Above this share the comments and the record summary say it. */
#define SNAPPROF__UNPLACED_NOTE 0.10
#define SNAPPROF__UNPLACED_PERIODS 10

/* The profile's comment lines, each starting "snapprof: ": what a reader
 * needs above every pprof report, and nothing more.
 *   1. samples, delivered against requested rate, trigger (always);
 *   2. what the timer trigger's samples are (only when it ran: see
 *      snapprof__stats_timer_note);
 *   3. failures, drops, truncations (only when there are any);
 *   4. the share of CPU time no sample could place (only above
 *      SNAPPROF__UNPLACED_NOTE).
 * Returns how many lines were written to lines. */
int snapprof__stats_comments(const snapprof_stats_t *st, uint64_t period_ns, int wall,
                             char lines[SNAPPROF__COMMENTS_MAX][SNAPPROF__COMMENT_MAX]);

#endif
