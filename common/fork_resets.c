/* Counts of the locks fork() children took anew (fork_resets.h). */
#include "common/fork_resets.h"

#include <stdatomic.h>

static atomic_uint g_resets[SNAPPROF__FORK_LOCK_COUNT];

void snapprof__fork_reset_note(snapprof__fork_lock_t lock)
{
    if ((unsigned)lock < SNAPPROF__FORK_LOCK_COUNT)
        atomic_fetch_add(&g_resets[lock], 1);
}

unsigned snapprof__fork_resets(snapprof__fork_lock_t lock)
{
    return (unsigned)lock < SNAPPROF__FORK_LOCK_COUNT ? atomic_load(&g_resets[lock]) : 0;
}
