/* The subcommands of the `snapprof` command. Internal to cli/. */
#ifndef SNAPPROF_CLI_CLI_H
#define SNAPPROF_CLI_CLI_H

#include <sys/types.h>

/* Exit statuses shared by the subcommands. */
#define SNAPPROF_EXIT_USAGE 2 /* bad input: nothing was done */

/* Prints "snapprof: " and the printf-formatted message as a line to
 * stderr; returns status (snapprof_record.c, which fuzz_record_options
 * includes). */
int snapprof__cli_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* `snapprof record [options] -- CMD ARGS...` (snapprof_record.c); argv
 * starts after "record". Returns the exit status. */
int snapprof__cli_record(int argc, char **argv);

/* Prints record's summary (snapprof_record_summary.c): the program's
 * command cmd, pid root and wait status, then what every process that
 * left a summary file in dir (NULL: none was made) collected. preload is
 * the preload library, taken out of LD_PRELOAD for dpkg. crash_off: the
 * program ran with --crash off. */
void snapprof__record_summary(const char *dir, pid_t root, const char *cmd, int status,
                              int crash_off, const char *preload);

/* `snapprof stats FILE` (snapprof_stats.c); argv starts after "stats".
 * Returns the exit status. */
int snapprof__cli_stats(int argc, char **argv);

/* The usage texts of the subcommands. */
extern const char snapprof__record_usage[];
extern const char snapprof__stats_usage[];

#endif
