/* The profiler's params (snapprof_params_t): their defaults, a caller's
 * copy read whatever the size of the header it was built with, and their
 * check at create. */
#include "sampling_thread/profiler_internal.h"
#include "sampling_thread/profiler_defaults.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

/* The defaults of every member this library knows, size included. */
static void params_defaults(snapprof_params_t *params)
{
    memset(params, 0, sizeof *params);
    params->size = sizeof *params;
    params->interval_ns = 10000000u;
    params->signal = SIGURG;
    params->copy_timeout_ns = 50000000u;
    params->mode = SNAPPROF_MODE_CPU;
    params->stack_buffer_size = 8u << 20;
    params->max_frames = 4096;
    params->idle_threshold_ns = 100000u;
    params->hitch_threshold_ns = 50000000u;
    params->trigger = SNAPPROF__TRIGGER_DEFAULT;
    params->wall_blocked = SNAPPROF__WALL_BLOCKED_DEFAULT;
    params->capture_memory_max = 64u << 20;
}

void snapprof_params_init_sized(snapprof_params_t *params, size_t size)
{
    if (!params || size < sizeof params->size)
        return;
    snapprof_params_t defaults;
    params_defaults(&defaults);
    size_t known = size < sizeof defaults ? size : sizeof defaults;
    memcpy(params, &defaults, known);
    /* A newer header's members, which this library has no defaults for. */
    memset((char *)params + known, 0, size - known);
    params->size = size;
}

/* Copies the caller's params into out: the members its header had, and
 * the defaults of the ones it did not (see snapprof_params_t). */
int snapprof__params_read(const snapprof_params_t *in, snapprof_params_t *out)
{
    if (in->size < SNAPPROF_PARAMS_SIZE_MIN)
        return -EINVAL; /* 0: not made by snapprof_params_init() */
    params_defaults(out);
    memcpy(out, in, in->size < sizeof *out ? in->size : sizeof *out);
    out->size = sizeof *out;
    return 0;
}

int snapprof__params_check(const snapprof_params_t *p)
{
    if (p->interval_ns < 10000u) /* 100 kHz is more than any use */
        return -EINVAL;
    if (p->signal <= 0 || p->signal >= NSIG)
        return -EINVAL;
    if (p->copy_timeout_ns == 0 || p->max_frames < 2 || p->stack_buffer_size < 4096)
        return -EINVAL;
    if (p->mode != SNAPPROF_MODE_CPU && p->mode != SNAPPROF_MODE_WALL)
        return -EINVAL;
    if ((unsigned)p->trigger >= SNAPPROF_TRIGGER_COUNT)
        return -EINVAL;
    if (p->trigger != SNAPPROF_TRIGGER_HANDSHAKE && p->capture_memory_max < (1u << 20))
        return -EINVAL;
    /* Wall mode's ticks read every thread whether or not anything is
     * attached, and the process-wide timer is made once for the whole
     * profile: neither stops when the triggers do. */
    if (p->arm_on_demand && (p->mode != SNAPPROF_MODE_CPU || p->unarmed_timer))
        return -EINVAL;
    return 0;
}
