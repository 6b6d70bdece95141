/* The module cache's scan (module_scan.c): candidates for the module table
 * (module_table.c) from the loader and /proc/self/maps, and the loader's
 * add/remove counters. Private to module_cache/.
 *
 * NOT async-signal-safe; callers hold module_table.c's g_lock, so no two
 * scans run at once. */
#ifndef SNAPPROF_MODULE_CACHE_MODULE_SCAN_H
#define SNAPPROF_MODULE_CACHE_MODULE_SCAN_H

#include <snapprof/snapprof.h>

#include <stddef.h>
#include <stdint.h>

/* GNU build-ids are 20 bytes (sha1) or 16 (md5, uuid); allow some more. */
#define BUILD_ID_MAX_BYTES 64
#define BUILD_ID_HEX_SIZE (2 * BUILD_ID_MAX_BYTES + 1)

/* A module as one refresh found it, before it is matched with an entry. */
typedef struct candidate {
    uintptr_t start, limit;
    uint64_t file_offset;
    uintptr_t load_bias;
    char *ident;      /* malloc'd */
    const char *path; /* display path; borrowed from ident, a map line or a constant */
    char build_id[BUILD_ID_HEX_SIZE];
    snapprof_module_kind_t kind;
    int is_main, from_maps;
    uint64_t inode;
} candidate_t;

typedef struct candidate_vec {
    candidate_t *v;
    size_t n, cap;
} candidate_vec_t;

/* Registers the fork() handlers of the gate around our calls into the
 * loader and notes the page size, the vdso and the executable's path.
 * Once, before anything else here. */
void snapprof__module_scan_init(void);

/* Collects the current modules into cv, sorted by start and disjoint: the
 * loader's objects and the executable mappings no object covers. Stores
 * the loader's add/remove counters in dl_counts[0..1] when it reports them
 * (even if the scan fails later), and whether /proc/self/maps could be
 * read in *maps_ok. Paths borrowed from map lines are replaced by keep()'s
 * copies (the table's interned strings). Returns 0, a negative errno
 * (cv may then hold some candidates: free it), or -EAGAIN when a fork() is
 * in progress. */
int snapprof__module_scan(candidate_vec_t *cv, int *maps_ok, unsigned long long dl_counts[2],
                          const char *(*keep)(const char *));

struct dl_phdr_info;

/* dl_iterate_phdr(cb, data) through the gate. Returns 1, or 0 without
 * calling it when a fork() is in progress. */
int snapprof__module_scan_iterate(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data);

/* Frees what cv holds and empties it. */
void snapprof__module_candidates_free(candidate_vec_t *cv);

/* The loader's counters without a scan: counts[0..1] = adds, subs and
 * counts[2] = 1 when the loader reports them (left alone otherwise). One
 * call into the loader, no /proc read. Returns 0 without calling it when a
 * fork() is in progress, else 1. */
int snapprof__module_loader_probe(unsigned long long counts[3]);

#endif
