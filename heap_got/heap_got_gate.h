/* The GOT patcher's gate around the loader across fork() (heap_got_gate.c). */
#ifndef SNAPPROF_HEAP_GOT_GATE_H
#define SNAPPROF_HEAP_GOT_GATE_H

/* Around every call into the loader (dl_iterate_phdr, dlsym): a scan
 * waits for the gate, the tick only tries it (-1: a fork is on its way,
 * do without the loader this once). */
void snapprof__heap_got_gate_lock(void);
int snapprof__heap_got_gate_trylock(void);
void snapprof__heap_got_gate_unlock(void);

/* fork()'s handlers (pthread_atfork): prepare waits, bounded, for a scan
 * in progress and holds the gate until parent; the child's comes back
 * unheld. */
void snapprof__heap_got_gate_fork_prepare(void);
void snapprof__heap_got_gate_fork_parent(void);
void snapprof__heap_got_gate_fork_child(void);

#endif
