/* DWARF source lines and inline frames (symbols_dwarf.c), used by the ELF
 * symbolizer (symbols_elf.c), never the reverse: symbols_dwarf.c calls
 * nothing in symbols_elf.c. Internal to module_cache/, but for
 * snapprof__elf_build_id(), which the unwinder's CFI tables use; the
 * unwinders open a .debug_frame through snapprof__symbols_open_frame_elf()
 * (module_cache.h).
 *
 * NOT async-signal-safe, and not thread-safe: callers hold symbols_elf.c's
 * g_sym_lock around every call. */
#ifndef SNAPPROF_SYMBOLS_DWARF_H
#define SNAPPROF_SYMBOLS_DWARF_H

#include <libelf.h>
#include <stddef.h>
#include <stdint.h>

typedef struct snapprof__dwarf snapprof__dwarf_t;

/* One source-level frame at an address, innermost first. Strings point
 * into libdw's data and live as long as the snapprof__dwarf_t (which the
 * cache keeps for the life of the process). */
typedef struct snapprof__dwarf_frame {
    const char *name;    /* linkage name when is_linkage_name, else DW_AT_name */
    int is_linkage_name; /* name is a (possibly mangled) linkage name */
    const char *file;    /* NULL when unknown */
    int line;            /* 0 when unknown */
    uint64_t entry;      /* outermost frame: the function's entry (ELF vaddr); else 0 */
} snapprof__dwarf_frame_t;

/* Opens the DWARF that describes the ELF object elf (read from path, whose
 * GNU build-id is build_id, "" if none): the object's own .debug_info, or a
 * separate debug file found by build-id under the debug directories
 * (DIR/.build-id/xx/rest.debug) or by .gnu_debuglink (next to the object,
 * in its .debug/ subdirectory, or DIR/<object's dir>/name), checked against
 * the build-id or the link's CRC. Returns NULL when there is none or it
 * cannot be read. elf must outlive the result when the DWARF is its own.
 * When a separate file is used, *debug_elf is set to it (the result owns
 * it; its .symtab may name functions the object's .dynsym lacks), else to
 * NULL. When separate lines are off for this object (snapprof__dwarf_set_lines()) a
 * separate file's DWARF is not read: the result is NULL, *debug_elf is set
 * all the same, for its .symtab, and the caller ends it with elf_end(). The
 * result is never freed: its strings are handed out for the life of the
 * process. */
snapprof__dwarf_t *snapprof__dwarf_open(Elf *elf, const char *path, const char *build_id,
                                        Elf **debug_elf);

/* Frees d, and the separate debug file it read (*debug_elf of
 * snapprof__dwarf_open()). Only for DWARF whose strings nobody kept: the
 * cache never frees its own; the fuzzing seam does. NULL is a no-op. */
void snapprof__dwarf_close(snapprof__dwarf_t *d);

/* Writes up to max frames for vaddr (an address in the ELF file's virtual
 * address space), innermost first: the innermost with the line table's
 * file:line, each outer one with the file:line of the inlined call it
 * contains; the last is the function the code belongs to (when max allows).
 * Returns the number written, 0 when the DWARF does not cover vaddr. */
int snapprof__dwarf_lookup(snapprof__dwarf_t *d, uint64_t vaddr, snapprof__dwarf_frame_t *out,
                           size_t max);

/* Opens the ELF file that holds the .debug_frame of the object at path
 * (an absolute path; build_id is its GNU build-id, "" if none): the object
 * itself when it has a .debug_frame with contents, else a separate debug
 * file found as snapprof__dwarf_open() finds one (it must have a
 * .debug_frame too). A file whose build-id differs from build_id is not
 * trusted. Returns the Elf, mapped with no descriptor kept open, for
 * dwarf_begin_elf(); the caller ends it with elf_end(). NULL when there is
 * none. Used by the .debug_frame unwinder and the CFI tables through
 * snapprof__symbols_open_frame_elf() (module_cache.h), which holds
 * g_sym_lock. */
Elf *snapprof__dwarf_open_frame_elf(const char *path, const char *build_id);

/* Replaces the debug directories ("dir[:dir...]", default
 * "/usr/lib/debug"). Affects modules symbolized for the first time after
 * the call. Test seam; g_sym_lock held. */
void snapprof__dwarf_set_debug_dirs(const char *dirs);

/* Whether snapprof__dwarf_open() reads the DWARF of separate debug files:
 * lines is a snapprof_lines_t (ALL, the default: always; OWN: never;
 * PROGRAM: except for objects in the system's library directories,
 * snapprof__dwarf_system_library()). Affects modules symbolized for the
 * first time after the call; g_sym_lock held. */
void snapprof__dwarf_set_lines(int lines);

/* Whether path names an object in the system's library directories
 * (/lib, /lib64, /usr/lib, /usr/lib64, /usr/lib32, /usr/libx32 and their
 * subdirectories): where SNAPPROF_LINES_PROGRAM reads no separate lines. */
int snapprof__dwarf_system_library(const char *path);

/* Hex GNU build-id of the ELF file (from its section headers) into hex, ""
 * when it has none. Checks debug files here; the ELF symbolizer and the
 * unwinder's CFI table use it too. */
void snapprof__elf_build_id(Elf *elf, char *hex, size_t hex_size);

#endif
