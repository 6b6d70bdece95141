/* unwinder_dflib.c under other names, compiled into the test executable
 * with -g -fno-asynchronous-unwind-tables -fno-unwind-tables: the
 * executable has an .eh_frame_hdr (for _start, its PLT and its other
 * files) that has no FDE for these functions. */
#define DFLIB(name) dfexe_##name
#include "unwinder_dflib.c"
