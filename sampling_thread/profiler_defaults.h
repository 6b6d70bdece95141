/* The defaults of snapprof_params_init() that the preload library and the
 * `snapprof` command apply to the settings they read. Both may be built
 * without the profiler, so they cannot call it: this header is where each
 * default is written, once. */
#ifndef SNAPPROF_PROFILER_DEFAULTS_H
#define SNAPPROF_PROFILER_DEFAULTS_H

#include "snapprof/snapprof.h"

/* What CPU mode uses unless told otherwise: the best trigger that works,
 * per thread (perf event, else CPU timer, else the handshake). */
#define SNAPPROF__TRIGGER_DEFAULT SNAPPROF_TRIGGER_AUTO
/* How wall mode samples blocked threads unless told otherwise: through
 * /proc, never signalling a waiting thread. */
#define SNAPPROF__WALL_BLOCKED_DEFAULT SNAPPROF_WALL_BLOCKED_PROC

#endif
