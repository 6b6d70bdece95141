/* What symbols_inline_prog.c and symbols_cxx_prog.cpp share (C and C++):
 * "PROG OUT.pb.gz SAMPLES", a pprof profile of the calling thread at 1 kHz
 * written to OUT.pb.gz, and the line symbols_e2e reads at the end. */
#ifndef SNAPPROF_TESTS_SYMBOLS_PROG_H
#define SNAPPROF_TESTS_SYMBOLS_PROG_H

#include <snapprof/snapprof.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Reads the command line (exit 2 when it is short) and starts profiling
 * the calling thread into argv[1] (exit 1 when that fails); *want is
 * SAMPLES. */
static inline snapprof_profiler_t *symbols_prog_start(int argc, char **argv, snapprof_thread_t **me,
                                                      uint64_t *want)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s OUT.pb.gz SAMPLES\n", argv[0]);
        exit(2);
    }
    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = 1000000;
    snapprof_profiler_t *p;
    snapprof_builder_t *b;
    if (snapprof_thread_register(me) != 0 || snapprof_profiler_create(&params, me, 1, &p) != 0 ||
        snapprof_pprof_builder_create(argv[1], &b) != 0 ||
        snapprof_profiler_add_builder(p, b) != 0 || snapprof_profiler_start(p) != 0) {
        fprintf(stderr, "profiler set-up failed\n");
        exit(1);
    }
    *want = strtoull(argv[2], NULL, 10);
    return p;
}

/* Stops p (writing the profile), prints "samples=N rc=RC" and returns
 * main's exit status. */
static inline int symbols_prog_finish(snapprof_profiler_t *p, snapprof_thread_t *me,
                                      const snapprof_stats_t *st)
{
    int rc = snapprof_profiler_stop(p);
    snapprof_profiler_destroy(p);
    snapprof_thread_release(me);
    printf("samples=%llu rc=%d\n", (unsigned long long)st->samples, rc);
    return rc == 0 ? 0 : 1;
}

#endif
