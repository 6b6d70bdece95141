/* Module cache: which loaded module holds an address, and its symbols.
 * Internal interface; the public part is snapprof_module_find() and
 * snapprof_symbolize() in <snapprof/snapprof.h>.
 *
 * The cache is process-wide and lives as long as the process. It is filled
 * from dl_iterate_phdr() and /proc/self/maps on the sampling thread (or any
 * caller thread), never in the signal handler. Entries are never freed:
 * unloaded modules are marked is_loaded = 0 and keep answering for frames
 * that already point at them.
 *
 * Thread and signal safety: every function here may be called from any
 * thread concurrently. NONE of them is async-signal-safe: they allocate,
 * take a mutex, read /proc and take the dynamic loader's lock. Never call
 * them from a signal handler or from a dl_iterate_phdr() callback.
 *
 * is_loaded of a module changes from 1 to 0 (once) during a refresh on
 * another thread; read it with __atomic_load_n() when the pointer was not
 * just returned by a call into the cache. */
#ifndef SNAPPROF_MODULE_CACHE_H
#define SNAPPROF_MODULE_CACHE_H

#include <snapprof/snapprof.h>

/* Rescans the loaded modules now. Returns 0 or a negative errno. */
int snapprof__module_cache_refresh(void);

/* Rescans only if the dynamic loader added or removed objects since the
 * last refresh: one dl_iterate_phdr() call when nothing changed. The
 * sampling thread calls it before unwinding a batch of samples so that a
 * dlclose()d library is not taken for loaded; snapprof_module_find() does
 * the same check by itself at most every 10 ms. Returns 0 or a negative
 * errno. */
int snapprof__module_cache_update(void);

struct dl_phdr_info;

/* dl_iterate_phdr(cb, data) for the library's other callers (the CFI
 * engine's scans), through the module cache's gate that fork() holds: a
 * fork child never inherits the loader's dl_load_write_lock held by one of
 * our threads (glibc 2.36 does not reset it in the child). Returns 1, or 0
 * without calling it when a fork() is in progress: do without the loader
 * this once. Any thread but the forking one's own atfork handlers. */
int snapprof__module_loader_iterate(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data);

/* How many children of fork() found the cache's lock held by a thread that
 * did not come along, and so started the cache afresh (a test seam). */
unsigned snapprof__module_cache_fork_resets(void);

/* How many refreshes (scans of the loader and /proc/self/maps) have worked
 * (a test seam). */
unsigned snapprof__module_cache_refreshes(void);

/* The same for the symbol tables (symbols_elf.c). */
unsigned snapprof__symbols_fork_resets(void);

/* snapprof_module_find() for a frame of a stack copied at when_ns
 * (CLOCK_MONOTONIC, 0 = now): JIT regions registered through <snapprof/jit.h>
 * come first (as of that time, see jit_regions.h), then loaded objects, then
 * the perf map for addresses no object holds. */
const snapprof_module_t *snapprof__module_find_at(uintptr_t addr, uint64_t when_ns);

/* Stores up to max pointers to known modules (loaded and unloaded, in
 * address order of the loaded ones first) in out; returns the total count. */
size_t snapprof__module_cache_list(const snapprof_module_t **out, size_t max);

/* The main executable's module, or NULL if it could not be found. */
const snapprof_module_t *snapprof__module_cache_main(void);

/* The FNV-1a basis of the module cache's string hashes (module_table.c,
 * symbols_elf.c, through snapprof__fnv1a64() of common/hash.h). It is not
 * FNV's standard offset basis (14695981039346656037, SNAPPROF_FNV1A64_BASIS)
 * but that number short of its last digit, as this code always had it; any
 * basis serves an in-memory table, and keeping it keeps the hashes as they
 * were. */
#define SNAPPROF_MODULE_HASH_BASIS 1469598103934665603ull

/* ------------------------------------------------------------------------ */
/* Symbols (symbols_elf.c)                                                  */
/* ------------------------------------------------------------------------ */

/* Symbolizes pc inside module (a native module: an ELF file, or "[vdso]"):
 * writes up to max symbols, innermost first, into out and returns how many
 * (0 when no function is known there), or a negative errno. With DWARF
 * (the object's own, or a separate debug file found by build-id or
 * .gnu_debuglink) every symbol has file:line and inlined calls come out as
 * extra symbols, the function the code belongs to last; without it, one
 * symbol from .symtab/.dynsym. C++ names are demangled into name, the
 * linkage name kept in system_name. The module may be any
 * snapprof_module_t, also one the cache did not make: tables are cached by
 * (path, build_id), loaded on first use and kept for the life of the
 * process, and every address's answer is cached; a file whose build-id
 * differs from module->build_id is not trusted (0 symbols). When the chain
 * is longer than max, the innermost max are returned. Returned strings
 * live as long as the process. */
int snapprof__symbols_lookup(const snapprof_module_t *module, uintptr_t pc, snapprof_symbol_t *out,
                             size_t max);

/* The ELF file that holds the .debug_frame of the object at path (an
 * absolute path; build_id its GNU build-id, "" if none): the object itself
 * when it has a .debug_frame with contents, else its separate debug file
 * (which must have one too, and the same build-id). Taken with the
 * symbolizer's lock held (it reads the debug directories) and libelf
 * initialised. Returns the Elf, mapped with no descriptor kept open, for
 * dwarf_begin_elf(); the caller ends it with elf_end(). NULL when there is
 * none. Any thread; never in the signal handler. (struct Elf is libelf's
 * Elf.) */
struct Elf *snapprof__symbols_open_frame_elf(const char *path, const char *build_id);

/* Test seam: replaces the directories searched for separate debug files
 * ("dir[:dir...]", default "/usr/lib/debug"); objects symbolized for the
 * first time afterwards use them. Returns 0. */
int snapprof__symbols_set_debug_dirs(const char *dirs);

/* Fuzzing seam (fuzz/fuzz_symbols.c): reads the ELF file at path the way
 * snapprof__symbols_lookup() reads a module's file (its symbol tables, its
 * own DWARF or a separate debug file found through the debug directories,
 * which the caller points somewhere harmless), looks up each of
 * vaddrs[0..n) and the start of each of its first 256 functions, hands
 * every symbol found to check, and then frees all of it, so that it can
 * run millions of times in one process. build_id is the module's ("" for
 * none). Returns the number of symbols found or a negative errno. Takes
 * the symbolizer's lock; any thread. */
int snapprof__symbols_fuzz_file(const char *path, const char *build_id, const uint64_t *vaddrs,
                                size_t n, void (*check)(const snapprof_symbol_t *sym, void *arg),
                                void *arg);

/* Pseudo modules: address ranges no loaded object backs, whose frames a
 * component names itself (python/'s "[python]": one pc per Python function
 * and line). snapprof_symbolize() of a native frame whose module is one
 * calls its symbolize function. At most 4; they live for the process.
 * Returns the module, or NULL when the table is full or out of memory.
 * Not async-signal-safe; any thread. */
typedef int (*snapprof__pseudo_symbolize_cb)(uintptr_t pc, snapprof_symbol_t *out, size_t max);
const snapprof_module_t *snapprof__module_pseudo_add(const char *path, uintptr_t start,
                                                     uintptr_t limit,
                                                     snapprof__pseudo_symbolize_cb symbolize);

#endif
