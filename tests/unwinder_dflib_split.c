/* unwinder_dflib.c under other names, for the library whose .debug_frame
 * is in a separate debug file. */
#define DFLIB_SPLIT 1
#include "unwinder_dflib.c"
