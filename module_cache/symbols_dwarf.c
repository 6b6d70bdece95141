/* DWARF line tables and inline frames for the module cache, through elfutils
 * libdw: finds an object's debug information (in the file itself, or in a
 * separate debug file by build-id or .gnu_debuglink) and answers "which
 * source lines and inlined calls hold this address".
 *
 * NOT async-signal-safe: it opens files, allocates and parses DWARF. Every
 * function here is called with symbols_elf.c's g_sym_lock held (libdw
 * objects are not thread-safe), never from the signal handler.
 *
 * libdwfl's dwfl_standard_find_debuginfo() is not used because it consults
 * debuginfod servers when DEBUGINFOD_URLS is set: a profiler must not fetch
 * files over the network from inside the profiled process. The search done
 * here is the local part of what gdb and eu-addr2line do.
 *
 * It sits below symbols_elf.c and calls nothing there; what both need (an
 * ELF file's build-id, snapprof__elf_build_id()) is here. */
#include "module_cache/symbols_dwarf.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <snapprof/snapprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* One address range of one compilation unit. */
typedef struct cu_range {
    uint64_t lo, hi;
    Dwarf_Die cudie; /* valid while dbg lives */
} cu_range_t;

struct snapprof__dwarf {
    Dwarf *dbg;
    Elf *elf;     /* the ELF dbg reads (the object itself or its debug file) */
    int owns_elf; /* elf is a separate debug file, opened here */
    cu_range_t *ranges;
    size_t n_ranges;
};

/* Where separate debug files live; "dir[:dir...]". Tests point it
 * elsewhere through snapprof__symbols_set_debug_dirs(). */
static char g_debug_dirs[PATH_MAX] = "/usr/lib/debug";

/* Whether DWARF is read from separate debug files too (SNAPPROF_LINES_ALL),
 * only from the object's own file (SNAPPROF_LINES_OWN), or from separate
 * files of objects outside the system's library directories
 * (SNAPPROF_LINES_PROGRAM). */
static int g_lines = SNAPPROF_LINES_ALL;

void snapprof__dwarf_set_lines(int lines)
{
    g_lines = lines;
}

int snapprof__dwarf_system_library(const char *path)
{
    static const char *const dirs[] = {"/lib/",       "/lib64/",     "/usr/lib/",
                                       "/usr/lib64/", "/usr/lib32/", "/usr/libx32/"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
        if (path && strncmp(path, dirs[i], strlen(dirs[i])) == 0)
            return 1;
    return 0;
}

/* Whether the DWARF of path's separate debug file is read (above). */
static int separate_lines(const char *path)
{
    if (g_lines == SNAPPROF_LINES_OWN)
        return 0;
    if (g_lines == SNAPPROF_LINES_PROGRAM)
        return !snapprof__dwarf_system_library(path);
    return 1;
}

void snapprof__dwarf_set_debug_dirs(const char *dirs)
{
    snprintf(g_debug_dirs, sizeof g_debug_dirs, "%s", dirs ? dirs : "");
}

/* Hex GNU build-id of the ELF file into hex ("" when it has none). */
void snapprof__elf_build_id(Elf *elf, char *hex, size_t hex_size)
{
    hex[0] = '\0';
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) == NULL || sh.sh_type != SHT_NOTE)
            continue;
        Elf_Data *data = elf_getdata(scn, NULL);
        if (data == NULL)
            continue;
        size_t off = 0, name_off, desc_off;
        GElf_Nhdr nh;
        while ((off = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
            if (nh.n_type != NT_GNU_BUILD_ID || nh.n_namesz != 4 ||
                memcmp((const char *)data->d_buf + name_off, "GNU", 4) != 0)
                continue;
            if (nh.n_descsz == 0 || 2 * (size_t)nh.n_descsz + 1 > hex_size)
                return;
            static const char digits[] = "0123456789abcdef";
            const unsigned char *d = (const unsigned char *)data->d_buf + desc_off;
            for (size_t k = 0; k < nh.n_descsz; k++) {
                hex[2 * k] = digits[d[k] >> 4];
                hex[2 * k + 1] = digits[d[k] & 15];
            }
            hex[2 * nh.n_descsz] = '\0';
            return;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Finding the debug information                                            */
/* ------------------------------------------------------------------------ */

static Elf_Scn *find_section(Elf *elf, const char *name)
{
    size_t shstrndx;
    if (elf_getshdrstrndx(elf, &shstrndx) != 0)
        return NULL;
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) == NULL)
            continue;
        const char *n = elf_strptr(elf, shstrndx, sh.sh_name);
        if (n != NULL && strcmp(n, name) == 0)
            return scn;
    }
    return NULL;
}

/* Whether elf carries DWARF we can use: a .debug_info with contents (a
 * stripped file may keep an empty or NOBITS one). */
static int has_debug_info(Elf *elf)
{
    Elf_Scn *scn = find_section(elf, ".debug_info");
    GElf_Shdr sh;
    return scn != NULL && gelf_getshdr(scn, &sh) != NULL && sh.sh_type != SHT_NOBITS &&
           sh.sh_size > 0;
}

/* An open candidate debug file. */
typedef struct opened {
    int fd;
    Elf *elf;
} opened_t;

static int open_elf(const char *path, opened_t *out)
{
    out->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (out->fd < 0)
        return -1;
    out->elf = elf_begin(out->fd, ELF_C_READ_MMAP, NULL);
    if (out->elf == NULL || elf_kind(out->elf) != ELF_K_ELF) {
        if (out->elf != NULL)
            elf_end(out->elf);
        close(out->fd);
        return -1;
    }
    return 0;
}

static void close_elf(opened_t *o)
{
    if (o->elf != NULL)
        elf_end(o->elf);
    if (o->fd >= 0)
        close(o->fd);
    o->elf = NULL;
    o->fd = -1;
}

/* CRC-32 of a whole file, as .gnu_debuglink records it (zlib's crc32 is
 * the same polynomial). Returns 0 on success. */
static int file_crc32(int fd, uint32_t *out)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0)
        return -1;
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED)
        return -1;
    uLong crc = crc32(0L, Z_NULL, 0);
    const unsigned char *b = p;
    size_t left = (size_t)st.st_size;
    while (left > 0) {
        uInt take = left > (1u << 30) ? (1u << 30) : (uInt)left;
        crc = crc32(crc, b, take);
        b += take;
        left -= take;
    }
    munmap(p, (size_t)st.st_size);
    *out = (uint32_t)crc;
    return 0;
}

/* Opens path as a debug file for an object with build-id build_id (hex,
 * may be "") or, without one, with debuglink CRC crc (when have_crc).
 * The file must carry DWARF. */
static int try_debug_file(const char *path, const char *build_id, int have_crc, uint32_t crc,
                          opened_t *out)
{
    if (open_elf(path, out) != 0)
        return -1;
    if (!has_debug_info(out->elf)) {
        close_elf(out);
        return -1;
    }
    char hex[2 * 64 + 1];
    snapprof__elf_build_id(out->elf, hex, sizeof hex);
    if (build_id[0] != '\0' && hex[0] != '\0') {
        if (strcmp(hex, build_id) != 0) {
            close_elf(out);
            return -1;
        }
        return 0;
    }
    uint32_t have;
    if (have_crc && (file_crc32(out->fd, &have) != 0 || have != crc)) {
        close_elf(out);
        return -1;
    }
    return 0;
}

/* The directory part of path ("" for none), without a " (deleted)" suffix
 * the kernel adds to the names of deleted files. */
static void dir_of(const char *path, char *dir, size_t size)
{
    dir[0] = '\0';
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        return;
    size_t len = (size_t)(slash - path);
    if (len >= size)
        return;
    memcpy(dir, path, len);
    dir[len] = '\0';
}

/* Looks for a separate debug file: first by build-id under each debug dir
 * (DIR/.build-id/xx/rest.debug), then by .gnu_debuglink next to the object,
 * in its .debug subdirectory and under each debug dir (DIR/objdir/name). */
static int find_separate(Elf *elf, const char *path, const char *build_id, opened_t *out)
{
    char dirs[PATH_MAX];
    snprintf(dirs, sizeof dirs, "%s", g_debug_dirs);
    char candidate[PATH_MAX * 2];
    if (strlen(build_id) > 2) {
        char *save = NULL;
        for (char *d = strtok_r(dirs, ":", &save); d != NULL; d = strtok_r(NULL, ":", &save)) {
            snprintf(candidate, sizeof candidate, "%s/.build-id/%.2s/%s.debug", d, build_id,
                     build_id + 2);
            if (try_debug_file(candidate, build_id, 0, 0, out) == 0)
                return 0;
        }
    }
    Elf_Scn *scn = find_section(elf, ".gnu_debuglink");
    Elf_Data *data = scn ? elf_getdata(scn, NULL) : NULL;
    /* A SHT_NOBITS section has a size and no bytes (d_buf NULL). */
    if (data == NULL || data->d_buf == NULL || data->d_size < 8)
        return -1;
    const char *name = data->d_buf;
    size_t name_len = strnlen(name, data->d_size);
    size_t crc_at = (name_len + 4) & ~(size_t)3; /* NUL, then padding to 4 */
    if (name_len == 0 || crc_at + 4 > data->d_size || strchr(name, '/') != NULL)
        return -1;
    uint32_t crc;
    memcpy(&crc, (const char *)data->d_buf + crc_at, 4);
    char objdir[PATH_MAX];
    dir_of(path, objdir, sizeof objdir);
    snprintf(candidate, sizeof candidate, "%s/%s", objdir, name);
    if (strcmp(candidate, path) != 0 && try_debug_file(candidate, build_id, 1, crc, out) == 0)
        return 0;
    snprintf(candidate, sizeof candidate, "%s/.debug/%s", objdir, name);
    if (try_debug_file(candidate, build_id, 1, crc, out) == 0)
        return 0;
    snprintf(dirs, sizeof dirs, "%s", g_debug_dirs);
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d != NULL; d = strtok_r(NULL, ":", &save)) {
        snprintf(candidate, sizeof candidate, "%s%s/%s", d, objdir, name);
        if (try_debug_file(candidate, build_id, 1, crc, out) == 0)
            return 0;
    }
    return -1;
}

static int range_cmp(const void *a, const void *b)
{
    const cu_range_t *x = a, *y = b;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return x->hi < y->hi ? -1 : x->hi > y->hi;
}

/* Indexes the address ranges of every compilation unit. libdw's own
 * dwarf_addrdie() needs .debug_aranges, which clang does not emit by
 * default; the CU DIEs' DW_AT_low_pc/high_pc/ranges are always there. */
static int index_units(snapprof__dwarf_t *d)
{
    size_t cap = 0;
    Dwarf_CU *cu = NULL;
    Dwarf_Half version;
    uint8_t unit_type;
    Dwarf_Die cudie;
    while (dwarf_get_units(d->dbg, cu, &cu, &version, &unit_type, &cudie, NULL) == 0) {
        /* Type units and dwz partial units hold no code of their own. */
        if (dwarf_tag(&cudie) != DW_TAG_compile_unit)
            continue;
        Dwarf_Addr base, lo, hi;
        ptrdiff_t off = 0;
        while ((off = dwarf_ranges(&cudie, off, &base, &lo, &hi)) > 0) {
            if (hi <= lo || lo == 0)
                continue; /* discarded code (garbage-collected sections) */
            if (d->n_ranges == cap) {
                size_t ncap = cap ? cap * 2 : 256;
                cu_range_t *r = realloc(d->ranges, ncap * sizeof *r);
                if (r == NULL)
                    return -ENOMEM;
                d->ranges = r;
                cap = ncap;
            }
            d->ranges[d->n_ranges++] = (cu_range_t){.lo = lo, .hi = hi, .cudie = cudie};
        }
    }
    /* DWARF without a single code range leaves d->ranges NULL, which
     * qsort() must not get even for no elements (found by fuzz_symbols). */
    if (d->n_ranges > 1)
        qsort(d->ranges, d->n_ranges, sizeof *d->ranges, range_cmp);
    return 0;
}

snapprof__dwarf_t *snapprof__dwarf_open(Elf *elf, const char *path, const char *build_id,
                                        Elf **debug_elf)
{
    *debug_elf = NULL;
    opened_t sep = {-1, NULL};
    Elf *use = NULL;
    if (has_debug_info(elf)) {
        use = elf;
    } else if (find_separate(elf, path ? path : "", build_id ? build_id : "", &sep) == 0) {
        use = sep.elf;
    } else {
        return NULL;
    }
    if (use == sep.elf && !separate_lines(path)) {
        /* Names only: the caller reads its .symtab and ends it. Its DWARF
         * is what costs (libc6-dbg's libc: 64 ms of inflating compressed
         * sections in dwarf_begin_elf(), most of a small program's
         * profile write). */
        elf_cntl(sep.elf, ELF_C_FDDONE);
        close(sep.fd);
        *debug_elf = sep.elf;
        return NULL;
    }
    snapprof__dwarf_t *d = calloc(1, sizeof *d);
    if (d == NULL) {
        close_elf(&sep);
        return NULL;
    }
    d->dbg = dwarf_begin_elf(use, DWARF_C_READ, NULL);
    if (d->dbg == NULL || index_units(d) != 0 || d->n_ranges == 0) {
        if (d->dbg != NULL)
            dwarf_end(d->dbg);
        free(d->ranges);
        free(d);
        close_elf(&sep);
        return NULL;
    }
    if (use == sep.elf) {
        /* The debug file's data is mapped (ELF_C_READ_MMAP); libelf needs
         * the descriptor no more, and the process need not keep one per
         * module open. */
        elf_cntl(sep.elf, ELF_C_FDDONE);
        close(sep.fd);
        *debug_elf = sep.elf;
        d->owns_elf = 1;
    }
    d->elf = use;
    return d;
}

void snapprof__dwarf_close(snapprof__dwarf_t *d)
{
    if (d == NULL)
        return;
    dwarf_end(d->dbg);
    if (d->owns_elf)
        elf_end(d->elf);
    free(d->ranges);
    free(d);
}

/* Whether elf has a .debug_frame with contents. */
static int has_debug_frame(Elf *elf)
{
    Elf_Scn *scn = find_section(elf, ".debug_frame");
    GElf_Shdr sh;
    return scn != NULL && gelf_getshdr(scn, &sh) != NULL && sh.sh_type != SHT_NOBITS &&
           sh.sh_size > 0;
}

Elf *snapprof__dwarf_open_frame_elf(const char *path, const char *build_id)
{
    opened_t obj = {-1, NULL}, sep = {-1, NULL};
    if (path == NULL || path[0] != '/' || open_elf(path, &obj) != 0)
        return NULL;
    char hex[2 * 64 + 1];
    snapprof__elf_build_id(obj.elf, hex, sizeof hex);
    if (build_id != NULL && build_id[0] != '\0' && strcmp(hex, build_id) != 0) {
        /* The file on disk is not the object that was loaded. */
        close_elf(&obj);
        return NULL;
    }
    if (has_debug_frame(obj.elf)) {
        elf_cntl(obj.elf, ELF_C_FDDONE);
        close(obj.fd);
        return obj.elf;
    }
    int found = find_separate(obj.elf, path, hex, &sep) == 0;
    close_elf(&obj);
    if (!found)
        return NULL;
    if (!has_debug_frame(sep.elf)) {
        close_elf(&sep);
        return NULL;
    }
    /* Mapped (ELF_C_READ_MMAP): the descriptor is not needed any more. */
    elf_cntl(sep.elf, ELF_C_FDDONE);
    close(sep.fd);
    return sep.elf;
}

/* ------------------------------------------------------------------------ */
/* Lookups                                                                  */
/* ------------------------------------------------------------------------ */

/* The CU DIE whose ranges hold vaddr, or NULL. Ranges of different CUs do
 * not overlap, so the last one starting at or below vaddr is the one. */
static Dwarf_Die *find_cu(snapprof__dwarf_t *d, uint64_t vaddr)
{
    size_t lo = 0, hi = d->n_ranges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->ranges[mid].lo <= vaddr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || vaddr >= d->ranges[lo - 1].hi)
        return NULL;
    return &d->ranges[lo - 1].cudie;
}

/* The function name of a subprogram or inlined call: the linkage
 * (mangled) name when there is one, else DW_AT_name, both looked up
 * through DW_AT_abstract_origin and DW_AT_specification. */
static const char *die_name(Dwarf_Die *die, int *is_linkage)
{
    Dwarf_Attribute attr;
    const char *s = NULL;
    if (dwarf_attr_integrate(die, DW_AT_linkage_name, &attr) != NULL ||
        dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr) != NULL)
        s = dwarf_formstring(&attr);
    *is_linkage = s != NULL;
    if (s == NULL)
        s = dwarf_diename(die);
    return s;
}

static int attr_udata(Dwarf_Die *die, unsigned name, Dwarf_Word *out)
{
    Dwarf_Attribute attr;
    return dwarf_attr(die, name, &attr) != NULL && dwarf_formudata(&attr, out) == 0 ? 0 : -1;
}

/* Whether die is a scope that holds code without having an address range
 * of its own: a namespace, module or class (clang nests the definitions of
 * templates and members there; gcc puts them at the top of the unit with a
 * DW_AT_specification). libdw's dwarf_getscopes() looks inside them too. */
static int holds_code_without_ranges(Dwarf_Die *die)
{
    switch (dwarf_tag(die)) {
    case DW_TAG_namespace:
    case DW_TAG_module:
    case DW_TAG_class_type:
    case DW_TAG_structure_type:
    case DW_TAG_union_type:
    case DW_TAG_interface_type:
        return 1;
    default:
        return 0;
    }
}

/* The child of parent whose code holds vaddr, looking through scopes that
 * hold code without ranges, into *out. Bounded in depth and, through
 * *visited, in DIEs visited, whatever sibling links corrupt DWARF has.
 * Returns 1 when found. */
static int child_holding(Dwarf_Die *parent, uint64_t vaddr, Dwarf_Die *out, int depth,
                         unsigned *visited)
{
    Dwarf_Die child, next;
    if (depth > 64 || dwarf_child(parent, &child) != 0)
        return 0;
    for (;;) {
        if (++*visited > (1u << 20))
            return 0; /* as deep as it got */
        if (dwarf_haspc(&child, vaddr) > 0) {
            *out = child;
            return 1;
        }
        if (holds_code_without_ranges(&child) &&
            child_holding(&child, vaddr, out, depth + 1, visited))
            return 1;
        if (dwarf_siblingof(&child, &next) != 0)
            return 0;
        child = next;
    }
}

/* The innermost DIE below cudie whose code holds vaddr, found the way
 * dwarf_getscopes() finds it: descending only into DIEs that hold vaddr
 * (and into namespaces and classes, which hold code without ranges).
 * dwarf_getscopes() itself is not used: after finding the scopes it makes a
 * second pass for the abstract origins of inlined code, and when a corrupt
 * origin reference fails that pass it returns -1 and leaks the scopes it
 * found (elfutils 0.188; fuzz/README.md has the report). Bounded in depth
 * and in DIEs visited. Returns 0, or -1 when no DIE below the CU holds
 * vaddr. */
static int innermost_scope(Dwarf_Die *cudie, uint64_t vaddr, Dwarf_Die *out)
{
    Dwarf_Die cur = *cudie;
    int found = 0;
    unsigned visited = 0;
    for (int depth = 0; depth < 256; depth++) {
        Dwarf_Die child;
        if (!child_holding(&cur, vaddr, &child, 0, &visited))
            break;
        cur = child;
        found = 1;
    }
    if (!found)
        return -1;
    *out = cur;
    return 0;
}

int snapprof__dwarf_lookup(snapprof__dwarf_t *d, uint64_t vaddr, snapprof__dwarf_frame_t *out,
                           size_t max)
{
    if (d == NULL || max == 0)
        return 0;
    Dwarf_Die *cudie = find_cu(d, vaddr);
    if (cudie == NULL)
        return 0;
    /* The line table gives the innermost position; each inlined call
     * record (DW_AT_call_file/line) gives the position in its caller. */
    const char *file = NULL;
    int line = 0;
    Dwarf_Line *l = dwarf_getsrc_die(cudie, vaddr);
    if (l != NULL) {
        file = dwarf_linesrc(l, NULL, NULL);
        if (dwarf_lineno(l, &line) != 0)
            line = 0;
    }
    /* The physical nesting of DIEs around the innermost scope, which
     * dwarf_getscopes_die() follows, is the chain of concrete callers (as
     * eu-addr2line -i does it). */
    Dwarf_Die innermost, *scopes = NULL;
    int nscopes = -1;
    if (innermost_scope(cudie, vaddr, &innermost) == 0)
        nscopes = dwarf_getscopes_die(&innermost, &scopes);
    if (nscopes <= 0) {
        free(scopes);
        return 0;
    }
    Dwarf_Files *files = NULL;
    size_t nfiles = 0;
    int have_files = dwarf_getsrcfiles(cudie, &files, &nfiles) == 0;
    size_t n = 0;
    for (int i = 0; i < nscopes && n < max; i++) {
        int tag = dwarf_tag(&scopes[i]);
        if (tag != DW_TAG_subprogram && tag != DW_TAG_inlined_subroutine)
            continue; /* lexical blocks and the CU itself */
        snapprof__dwarf_frame_t *f = &out[n++];
        memset(f, 0, sizeof *f);
        f->name = die_name(&scopes[i], &f->is_linkage_name);
        f->file = file;
        f->line = line;
        if (tag == DW_TAG_subprogram) {
            Dwarf_Addr entry;
            if (dwarf_entrypc(&scopes[i], &entry) == 0)
                f->entry = entry;
            break; /* the outermost: the function the code belongs to */
        }
        /* An inlined call: the next frame out is where it was called. */
        Dwarf_Word call_file, call_line;
        file = NULL;
        line = 0;
        if (have_files && attr_udata(&scopes[i], DW_AT_call_file, &call_file) == 0 &&
            call_file < nfiles)
            file = dwarf_filesrc(files, call_file, NULL, NULL);
        if (attr_udata(&scopes[i], DW_AT_call_line, &call_line) == 0)
            line = (int)call_line;
    }
    free(scopes);
    /* Unnamed frames (artificial code) would be useless in a profile. */
    for (size_t i = 0; i < n; i++)
        if (out[i].name == NULL)
            out[i].name = "[inlined]";
    return (int)n;
}
