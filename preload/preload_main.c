/* libsnapprof-preload.so's constructor and exit handler: reads the
 * environment and starts the whole-process profile when it asks for one;
 * stops and writes it at exit. The top of the preload's files: it calls
 * the control code (preload_control.c), fork's (preload_fork.c) and the
 * signals' set-up (preload_signals.c), and nothing calls it, so that
 * preload_process.c (the lock and the flags every file uses) calls none of
 * them. The preload's only constructor. */
#include "preload/preload_process.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void on_exit_(void)
{
    snapprof__preload_stop("exit");
}

/* Reads the environment into cfg (preload_config.c). Returns 1 when it
 * asks for a profile. */
static int config_from_env(snapprof__preload_config_t *cfg)
{
    return snapprof__config_from_env(cfg, getenv, snapprof__preload_warn);
}

__attribute__((constructor)) static void preload_init(void)
{
    snapprof__preload_signals_init();
    /* Resolved now, in no signal handler and no child of a raw clone():
     * every syscall() of the library's goes through ours. */
    snapprof__preload_real_syscall();
    snapprof__preload_real_prctl();
    atexit(on_exit_);
    pthread_atfork(NULL, NULL, snapprof__preload_atfork_child);
    static snapprof__preload_config_t cfg; /* a few pages: not on the stack */
    if (!config_from_env(&cfg))
        return;
    if (getuid() != geteuid())
        return; /* as gperftools: never for set-user-ID programs */
    /* The first profiled process writes FILE; processes it starts, and
     * what they exec, write FILE with their pid (file_names.h). */
    char me[32];
    snprintf(me, sizeof me, "%d", (int)getpid());
    const char *root = getenv(SNAPPROF_ENV_ROOT_PID);
    if (!root || !*root) {
        setenv(SNAPPROF_ENV_ROOT_PID, me, 1);
    } else if (strcmp(root, me) != 0) {
        if (!cfg.follow_fork || snapprof__preload_child_paths(&cfg, (int)getpid()) != 0)
            return;
    }
    char why[512];
    if (snapprof__preload_start(&cfg, SNAPPROF_PRELOAD_FALLBACK, why, sizeof why) != 0)
        snapprof__preload_warn("not profiling: %s", why);
}
