/* The subcommands of the `snapprof` command. Internal to cli/. */
#ifndef SNAPPROF_CLI_CLI_H
#define SNAPPROF_CLI_CLI_H

/* Exit statuses shared by the subcommands. */
#define SNAPPROF_EXIT_USAGE 2 /* bad input: nothing was done */

/* `snapprof record [options] -- CMD ARGS...` (snapprof_record.c); argv
 * starts after "record". Returns the exit status. */
int snapprof__cli_record(int argc, char **argv);

/* `snapprof stats FILE` (snapprof_stats.c); argv starts after "stats".
 * Returns the exit status. */
int snapprof__cli_stats(int argc, char **argv);

/* The usage texts of the subcommands. */
extern const char snapprof__record_usage[];
extern const char snapprof__stats_usage[];

#endif
