/* The library's own file descriptors (fds.h): at the top of the range,
 * within a budget. */
#include "common/fds.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <unistd.h>

/* Our fds stay below this (trigger_arms.c looks perf events up by fd in a
 * table of this size). */
#define FD_TOP 65536
/* At most this many fds of ours in all. */
#define BUDGET_MAX 4096
/* At most this many for the /proc cache. */
#define PROC_MAX 16

static _Atomic int g_held[SNAPPROF__FD_KIND_COUNT];
static _Atomic uint64_t g_lost, g_held_max;

/* The budget (all kinds) and the floor under a soft limit of limit. */
static void budget_for(rlim_t limit, int *budget, int *floor)
{
    int top = limit == RLIM_INFINITY || limit > FD_TOP ? FD_TOP : (int)limit;
    int b = top / 16;
    if (b > BUDGET_MAX)
        b = BUDGET_MAX;
    *budget = b;
    *floor = top - b;
}

void snapprof__fd_budget(int *budget, int *floor)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        *budget = 0;
        *floor = FD_TOP;
        return;
    }
    budget_for(rl.rlim_cur, budget, floor);
}

/* The share of the budget kind may hold. */
static int share_of(snapprof__fd_kind_t kind, int budget)
{
    int proc = budget / 4 < PROC_MAX ? budget / 4 : PROC_MAX;
    return kind == SNAPPROF__FD_PROC ? proc : budget - proc;
}

int snapprof__fd_place(int fd, snapprof__fd_kind_t kind)
{
    int budget, floor;
    snapprof__fd_budget(&budget, &floor);
    /* fd is the lowest free number: the program's own use reaches about
     * there. It must stay a budget below our floor. */
    if (budget < 4 || fd + budget >= floor)
        return -EMFILE;
    int held = atomic_fetch_add(&g_held[kind], 1) + 1;
    if (held > share_of(kind, budget)) {
        atomic_fetch_sub(&g_held[kind], 1);
        return -EMFILE;
    }
    int high = fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (high < 0 || high >= floor + budget) {
        if (high >= 0)
            close(high); /* above the top (a limit above FD_TOP) */
        atomic_fetch_sub(&g_held[kind], 1);
        return -EMFILE;
    }
    close(fd);
    uint64_t all = 0;
    for (int k = 0; k < SNAPPROF__FD_KIND_COUNT; k++)
        all += (uint64_t)atomic_load(&g_held[k]);
    uint64_t max = atomic_load(&g_held_max);
    while (all > max && !atomic_compare_exchange_weak(&g_held_max, &max, all)) {
    }
    return high;
}

int snapprof__fd_room(snapprof__fd_kind_t kind)
{
    int budget, floor;
    snapprof__fd_budget(&budget, &floor);
    return budget >= 4 && atomic_load(&g_held[kind]) < share_of(kind, budget);
}

void snapprof__fd_release(snapprof__fd_kind_t kind)
{
    atomic_fetch_sub(&g_held[kind], 1);
}

void snapprof__fd_lost(void)
{
    atomic_fetch_add(&g_lost, 1);
}

uint64_t snapprof__fds_lost(void)
{
    return atomic_load(&g_lost);
}

uint64_t snapprof__fds_held_max(void)
{
    return atomic_load(&g_held_max);
}
