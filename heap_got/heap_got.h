/* GOT patching (heap_got.c), as the tests see it: the public side is
 * snapprof_heap_hooks_install() and friends in <snapprof/heap.h>. Internal,
 * never installed. */
#ifndef SNAPPROF_HEAP_GOT_HEAP_GOT_H
#define SNAPPROF_HEAP_GOT_HEAP_GOT_H

/* The number of GOT entries that point at the hooks now in the loaded
 * modules whose file name starts with basename_prefix ("libnss_compat").
 * Any thread; takes the patcher's lock. */
int snapprof__heap_got_module_entries(const char *basename_prefix);

#endif
