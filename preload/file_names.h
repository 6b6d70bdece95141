/* The names of every file a run writes, made in one place (the README's
 * "Files a run writes" says the same for users):
 *
 *     BASE[.KIND][.INTERVAL][.PID]EXT
 *
 *   BASE      the output path as asked for (absolute), less EXT.
 *   EXT       the format extension that path ends with, as written
 *             (".pb.gz", ".pb", ".prof", ".folded", ".txt", ".json"), or
 *             "" when it ends with none (CPUPROFILE=/tmp/prof).
 *   KIND      the kind of profile when it is not the CPU (or wall) profile:
 *             a lowercase word, letters only: "heap" (the heap profile),
 *             "heappeak" (the heap profile at its in-use peak). Those are
 *             pprof whatever the CPU profile's format: their EXT is
 *             always ".pb.gz".
 *   INTERVAL  for a profile of one time interval of a periodic run: its
 *             UTC start, ISO 8601 basic, "20261127T153200Z". None today.
 *   PID       the process, decimal, for every process but the first one
 *             profiled (the program itself writes BASE...EXT exactly as
 *             asked).
 *
 * The one exception is the gperftools drop-in: under CPUPROFILE=FILE a
 * child writes FILE_PID, as gperftools does.
 *
 * The parts never look alike (a word, a time with T and Z, a number), so
 * each name says which part it has. A file that cannot be written where
 * asked goes to DIR/snapprof[-I].PID EXT (DIR $TMPDIR, /tmp or /var/tmp; I
 * the output's index when a run writes several): the same scheme with
 * BASE DIR/snapprof[-I] and the pid always there, since DIR is shared.
 *
 * `snapprof record` also has each process leave PID.summary (and, when a
 * crash left no time to write it, PID.crash) in a private directory it
 * removes when it has read them.
 *
 * Plain libc, no snapprof calls: linked into the preload library and the
 * command alike. */
#ifndef SNAPPROF_FILE_NAMES_H
#define SNAPPROF_FILE_NAMES_H

#include <stddef.h>

/* What follows PID in the files of `snapprof record`'s private directory. */
#define SNAPPROF__RECORD_SUMMARY_EXT ".summary"
#define SNAPPROF__RECORD_CRASH_EXT ".crash"
/* The summary of a process that dropped its privileges, in a file it
 * opened before (preload_held.c). */
#define SNAPPROF__RECORD_HELD_EXT ".held"

/* The length of BASE in path: path less a format extension it ends with
 * (case-insensitive; never the whole name). */
size_t snapprof__name_base_length(const char *path);

/* The name of one file of output path asked: BASE[.KIND][.INTERVAL][.PID]EXT,
 * kind and interval NULL or "" when absent, pid 0 when absent. Returns 0,
 * or -1 when it does not fit (out is then not to be used). */
int snapprof__name_file(const char *asked, const char *kind, const char *interval, int pid,
                        char *out, size_t size);

/* The path asked for a profile of another kind beside the output asked
 * (BASE.KIND EXT, ext the kind's own format extension): the family of that
 * profile's names, as snapprof__name_file() takes it. Returns 0 or -1 as
 * above. */
int snapprof__name_kind_family(const char *asked, const char *kind, const char *ext, char *out,
                               size_t size);

/* Where output index of n_outputs, whose files end in ext, goes when its
 * own path cannot be written: DIR/snapprof[-INDEX].PID EXT. Returns 0 or -1
 * as above. */
int snapprof__name_fallback(const char *dir, unsigned index, unsigned n_outputs, const char *ext,
                            int pid, char *out, size_t size);

/* 1 when path is a file of another process of the same output as asked:
 * BASE.PID EXT (nothing between BASE and PID). */
int snapprof__name_is_pid_file(const char *asked, const char *path);

/* A shell pattern for every file of another process of output asked,
 * quoted for the shell: 'BASE'.[0-9]*'EXT'. Returns 0 or -1 as above. */
int snapprof__name_pid_glob(const char *asked, char *out, size_t size);

/* What gperftools names a child's file of CPUPROFILE=FILE: FILE_PID,
 * whatever FILE ends with (the drop-in keeps gperftools' names). Returns 0
 * or -1 as above. */
int snapprof__name_gperftools_child(const char *asked, int pid, char *out, size_t size);

/* DIR/PID.summary and the like, ext one of the SNAPPROF__RECORD_*_EXT.
 * Returns 0 or -1 as above. */
int snapprof__name_record_file(const char *dir, int pid, const char *ext, char *out, size_t size);

#endif
