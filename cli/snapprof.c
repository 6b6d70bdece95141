/* snapprof, the command: dispatches to its subcommands, `snapprof record`
 * (snapprof_record.c) and `snapprof stats` (snapprof_stats.c). */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

#ifndef SNAPPROF_VERSION_STRING
#define SNAPPROF_VERSION_STRING "unknown"
#endif

static const char usage_text[] = "usage: snapprof record [options] -- CMD [ARGS...]\n"
                                 "       snapprof stats FILE\n"
                                 "       snapprof --version\n"
                                 "\n"
                                 "record  runs CMD with every thread sampled and writes profiles\n"
                                 "stats   prints the counters a snapprof pprof profile carries\n"
                                 "\n"
                                 "snapprof COMMAND --help says more.\n";

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_text, stderr);
        return SNAPPROF_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("snapprof %s\n", SNAPPROF_VERSION_STRING);
        return 0;
    }
    if (strcmp(cmd, "record") == 0)
        return snapprof__cli_record(argc - 2, argv + 2);
    if (strcmp(cmd, "stats") == 0)
        return snapprof__cli_stats(argc - 2, argv + 2);
    fprintf(stderr,
            "snapprof: unknown command '%s' (try: snapprof record -- CMD [ARGS...], or snapprof "
            "stats FILE)\n",
            cmd);
    return SNAPPROF_EXIT_USAGE;
}
