/* Compiled CFI tables (cfi_table.h): a module's FDE index read from its
 * file, and rows compiled from elfutils' CFI reader per FDE on first use.
 *
 * The FDE index says where each FDE starts, which libdw does not tell: for
 * .eh_frame it is the binary-search table of .eh_frame_hdr (the index the
 * loader and libunwind use), read from the file; for .debug_frame it is
 * dwarf_next_cfi's walk over the section, whose FDEs begin with an
 * absolute address. Everything about the rules comes from libdw: an FDE
 * is compiled by asking dwarf_cfi_addrframe for the row at its start, then
 * at the end of each row, until the FDE ends. */
#include "unwinder/cfi_table.h"

#include "module_cache/module_cache.h"
#include "module_cache/symbols_dwarf.h"

#include "common/fd_private.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* An FDE whose rows are not compiled yet. */
#define NOT_COMPILED UINT32_MAX
/* Rows kept per FDE at most: no compiler emits more, and a corrupt FDE
 * must not make the table grow without end. */
#define MAX_ROWS_PER_FDE 65536u

typedef struct fde {
    uint64_t start;     /* ELF virtual address of its first byte */
    uint32_t first_row; /* index into rows; NOT_COMPILED until compiled */
    uint32_t row_count; /* rows made of it */
    uint64_t end;       /* one past the last address its rows cover */
} fde_t;

struct snapprof__cfi_table {
    snapprof__cfi_source_t source;
    uintptr_t load_bias;
    Elf *elf;       /* the file the CFI is read from */
    Dwarf *dbg;     /* .debug_frame: owns cfi */
    Dwarf_CFI *cfi; /* .eh_frame: from dwarf_getcfi_elf, ended by dwarf_cfi_end */
    fde_t *fdes;    /* sorted by start */
    size_t fde_count, fdes_compiled;
    snapprof__cfi_row_t *rows;
    size_t row_count, row_cap, fallback_rows;
    uint64_t build_ns;
};

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int fde_cmp(const void *a, const void *b)
{
    const fde_t *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int add_fde(snapprof__cfi_table_t *t, size_t *cap, uint64_t start)
{
    if (t->fde_count == *cap) {
        size_t n = *cap ? *cap * 2 : 256;
        fde_t *p = realloc(t->fdes, n * sizeof *p);
        if (!p)
            return -ENOMEM;
        t->fdes = p;
        *cap = n;
    }
    t->fdes[t->fde_count++] = (fde_t){.start = start, .first_row = NOT_COMPILED};
    return 0;
}

/* ------------------------------------------------------------------------ */
/* FDE indexes                                                              */
/* ------------------------------------------------------------------------ */

/* Size of a .eh_frame_hdr header field in encoding enc, or 0 for one this
 * index does not take (uleb128, omitted). */
static size_t encoded_size(uint8_t enc)
{
    switch (enc & 0x0f) {
    case 0x00: /* DW_EH_PE_absptr */
    case 0x04: /* udata8 */
    case 0x0c: /* sdata8 */
        return 8;
    case 0x03: /* udata4 */
    case 0x0b: /* sdata4 */
        return 4;
    case 0x02: /* udata2 */
    case 0x0a: /* sdata2 */
        return 2;
    default:
        return 0;
    }
}

/* The FDE starts of .eh_frame from the binary-search table of the file's
 * .eh_frame_hdr (PT_GNU_EH_FRAME): version 1, table entries encoded
 * DW_EH_PE_datarel | DW_EH_PE_sdata4 (relative to the header), which is
 * what every linker writes and what libunwind and the engine accept too.
 * Returns 0, -ENOENT when the file has no usable table, -ENOMEM. */
static int index_eh_frame(snapprof__cfi_table_t *t)
{
    size_t phnum = 0;
    if (elf_getphdrnum(t->elf, &phnum) != 0)
        return -ENOENT;
    for (size_t i = 0; i < phnum; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(t->elf, (int)i, &ph) || ph.p_type != PT_GNU_EH_FRAME)
            continue;
        Elf_Data *d = elf_getdata_rawchunk(t->elf, (int64_t)ph.p_offset, ph.p_filesz, ELF_T_BYTE);
        if (!d || d->d_size < 4)
            return -ENOENT;
        const uint8_t *h = d->d_buf;
        size_t size = d->d_size;
        if (h[0] != 1 || h[3] != 0x3b)
            return -ENOENT;
        size_t ptr_size = encoded_size(h[1]), count_size = encoded_size(h[2]);
        if (ptr_size == 0 || count_size == 0 || 4 + ptr_size + count_size > size)
            return -ENOENT;
        uint64_t count = 0;
        if (count_size == 8) {
            memcpy(&count, h + 4 + ptr_size, 8);
        } else if (count_size == 4) {
            uint32_t c;
            memcpy(&c, h + 4 + ptr_size, 4);
            count = c;
        } else {
            uint16_t c;
            memcpy(&c, h + 4 + ptr_size, 2);
            count = c;
        }
        size_t table = 4 + ptr_size + count_size;
        if (count == 0 || count > (size - table) / 8)
            return -ENOENT;
        size_t cap = 0;
        for (uint64_t k = 0; k < count; k++) {
            int32_t rel;
            memcpy(&rel, h + table + k * 8, 4);
            if (add_fde(t, &cap, ph.p_vaddr + (uint64_t)(int64_t)rel) != 0)
                return -ENOMEM;
        }
        return 0;
    }
    return -ENOENT;
}

/* The FDE starts of the .debug_frame section of t->elf: dwarf_next_cfi
 * walks the entries; an FDE's data begins with its initial location, an
 * address of the target's size (x86-64: 8 bytes) with no encoding in
 * .debug_frame. Returns 0, -ENOENT, -ENOMEM. */
static int index_debug_frame(snapprof__cfi_table_t *t)
{
    size_t shstrndx;
    if (elf_getshdrstrndx(t->elf, &shstrndx) != 0)
        return -ENOENT;
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(t->elf, scn)) != NULL) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh))
            continue;
        const char *name = elf_strptr(t->elf, shstrndx, sh.sh_name);
        if (!name || strcmp(name, ".debug_frame") != 0)
            continue;
        /* libdw decompressed the section in place when it opened it; this
         * only matters if it did not. */
        if ((sh.sh_flags & SHF_COMPRESSED) && elf_compress(scn, 0, 0) < 0)
            return -ENOENT;
        Elf_Data *d = elf_getdata(scn, NULL);
        if (!d || !d->d_buf)
            return -ENOENT;
        const unsigned char *ident = (const unsigned char *)elf_getident(t->elf, NULL);
        if (!ident)
            return -ENOENT;
        size_t cap = 0;
        Dwarf_Off off = 0, next;
        Dwarf_CFI_Entry e;
        while (dwarf_next_cfi(ident, d, false, off, &next, &e) == 0) {
            if (e.CIE_id != DW_CIE_ID_64 && e.fde.end - e.fde.start >= 8) {
                uint64_t start;
                memcpy(&start, e.fde.start, 8);
                if (add_fde(t, &cap, start) != 0)
                    return -ENOMEM;
            }
            if (next <= off)
                break;
            off = next;
        }
        return t->fde_count > 0 ? 0 : -ENOENT;
    }
    return -ENOENT;
}

/* Sorts the index and drops repeated starts (the first one wins, as in a
 * binary search of .eh_frame_hdr). */
static void sort_index(snapprof__cfi_table_t *t)
{
    qsort(t->fdes, t->fde_count, sizeof *t->fdes, fde_cmp);
    size_t out = 0;
    for (size_t i = 0; i < t->fde_count; i++)
        if (out == 0 || t->fdes[out - 1].start != t->fdes[i].start)
            t->fdes[out++] = t->fdes[i];
    t->fde_count = out;
}

/* ------------------------------------------------------------------------ */
/* Rows                                                                     */
/* ------------------------------------------------------------------------ */

/* The offset o that ops (as libdw gives a register's rule) saves the
 * register at, CFA + o: [DW_OP_call_frame_cfa] or [DW_OP_call_frame_cfa,
 * DW_OP_plus_uconst o] (libdw writes negative offsets as wrapped unsigned
 * numbers; see its dwarf_frame_register.c). Returns 0, or -1 for any other
 * rule (values, expressions, other registers). */
static int saved_at_cfa(const Dwarf_Op *ops, size_t nops, int16_t *out)
{
    if (nops < 1 || nops > 2 || ops[0].atom != DW_OP_call_frame_cfa)
        return -1;
    int64_t o = 0;
    if (nops == 2) {
        if (ops[1].atom != DW_OP_plus_uconst)
            return -1;
        o = (int64_t)ops[1].number;
    }
    if (o < INT16_MIN || o > INT16_MAX)
        return -1;
    *out = (int16_t)o;
    return 0;
}

/* Compiles the row libdw made for one address. */
static snapprof__cfi_row_t compile_row(Dwarf_Frame *f, int ra, bool signal)
{
    snapprof__cfi_row_t r = {.kind = SNAPPROF__CFI_ROW_FALLBACK};
    /* Signal trampolines (whose CFA is an expression anyway) and any
     * return-address column but rip go to the interpreting unwinder. */
    if (signal || ra != SNAPPROF_REG_PC)
        return r;
    Dwarf_Op *ops = NULL;
    size_t nops = 0;
    if (dwarf_frame_cfa(f, &ops, &nops) != 0 || nops != 1)
        return r;
    uint64_t reg;
    int64_t off;
    if (ops[0].atom == DW_OP_bregx) {
        reg = ops[0].number;
        off = (int64_t)ops[0].number2;
    } else if (ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31) {
        reg = (uint64_t)(ops[0].atom - DW_OP_breg0);
        off = (int64_t)ops[0].number;
    } else {
        return r;
    }
    if ((reg != SNAPPROF_REG_SP && reg != SNAPPROF_REG_FP) || off < INT32_MIN || off > INT32_MAX)
        return r;
    Dwarf_Op mem[3];
    ops = NULL;
    nops = 0;
    if (dwarf_frame_register(f, SNAPPROF_REG_PC, mem, &ops, &nops) != 0)
        return r;
    if (nops == 0) {
        /* Undefined (ops point into mem) ends the stack; "same value" for
         * the return address means nothing sensible. */
        if (ops != NULL)
            r.kind = SNAPPROF__CFI_ROW_OUTERMOST;
        return r;
    }
    int16_t ra_off, rbp_off = 0;
    if (saved_at_cfa(ops, nops, &ra_off) != 0)
        return r;
    uint8_t flags = 0;
    ops = NULL;
    nops = 0;
    if (dwarf_frame_register(f, SNAPPROF_REG_FP, mem, &ops, &nops) != 0)
        return r;
    if (nops > 0) {
        if (saved_at_cfa(ops, nops, &rbp_off) != 0)
            return r;
        flags = SNAPPROF__CFI_ROW_RBP_SAVED;
    }
    /* Same value or undefined: rbp keeps the callee's value, as in the
     * .debug_frame unwinder. */
    r.cfa_reg = (uint8_t)reg;
    r.cfa_offset = (int32_t)off;
    r.ra_offset = ra_off;
    r.rbp_offset = rbp_off;
    r.kind = SNAPPROF__CFI_ROW_RULES | flags;
    return r;
}

static int push_row(snapprof__cfi_table_t *t, snapprof__cfi_row_t r)
{
    if (t->row_count == t->row_cap) {
        size_t n = t->row_cap ? t->row_cap * 2 : 64;
        if (n > UINT32_MAX)
            return -ENOMEM;
        snapprof__cfi_row_t *p = realloc(t->rows, n * sizeof *p);
        if (!p)
            return -ENOMEM;
        t->rows = p;
        t->row_cap = n;
    }
    t->rows[t->row_count++] = r;
    return 0;
}

/* Makes the rows of FDE i: the row at its start, then the row at the end
 * of each, until libdw finds no row, the next FDE begins, or a row does not
 * hold the address asked for. An FDE that yields no row keeps none, so its
 * pcs are not covered. Returns 0 or -ENOMEM (the FDE stays uncompiled).
 * The caller times it: reading the thread's CPU clock is a system call,
 * which cost a third of a whole-table build when made for every FDE. */
static int compile_fde(snapprof__cfi_table_t *t, size_t i)
{
    fde_t *fde = &t->fdes[i];
    uint64_t limit = i + 1 < t->fde_count ? t->fdes[i + 1].start : UINT64_MAX;
    size_t first = t->row_count;
    uint64_t pc = fde->start;
    int rc = 0;
    while (pc < limit && t->row_count - first < MAX_ROWS_PER_FDE) {
        Dwarf_Frame *f = NULL;
        if (dwarf_cfi_addrframe(t->cfi, pc, &f) != 0)
            break;
        Dwarf_Addr start = 0, end = 0;
        bool signal = false;
        int ra = dwarf_frame_info(f, &start, &end, &signal);
        if (start > pc || end <= pc || pc - fde->start > UINT32_MAX) {
            free(f);
            break;
        }
        snapprof__cfi_row_t r = compile_row(f, ra, signal);
        free(f);
        r.start = (uint32_t)(pc - fde->start);
        if ((r.kind & SNAPPROF__CFI_ROW_KIND_MASK) == SNAPPROF__CFI_ROW_FALLBACK)
            t->fallback_rows++;
        if ((rc = push_row(t, r)) != 0)
            break;
        pc = end < limit ? end : limit;
    }
    if (rc != 0) {
        t->row_count = first;
    } else {
        fde->first_row = (uint32_t)first;
        fde->row_count = (uint32_t)(t->row_count - first);
        fde->end = pc;
        t->fdes_compiled++;
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Tables                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct object_open {
    const char *path, *build_id;
    Elf *elf;
} object_open_t;

/* Opens o->path's ELF file, mapped, with no descriptor kept, into o->elf
 * if its build-id is o->build_id (or either is unknown). */
static int open_object_here(void *arg)
{
    object_open_t *o = arg;
    int fd = open(o->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (elf && elf_kind(elf) == ELF_K_ELF) {
        char hex[2 * 64 + 1];
        snapprof__elf_build_id(elf, hex, sizeof hex);
        if (!o->build_id || !o->build_id[0] || strcmp(hex, o->build_id) == 0) {
            elf_cntl(elf, ELF_C_FDDONE);
            close(fd);
            o->elf = elf;
            return 0;
        }
    }
    if (elf)
        elf_end(elf);
    close(fd);
    return 0;
}

/* open_object_here() on the thread with an fd table of its own
 * (common/fd_private.h): the sampling thread meets a module for the first
 * time while the program runs, and the moment of the file's fd must not
 * take one of the program's numbers. The mapping outlives the fd. */
static Elf *open_object(const char *path, const char *build_id)
{
    object_open_t o = {.path = path, .build_id = build_id};
    snapprof__fd_private_run(open_object_here, &o);
    return o.elf;
}

void snapprof__cfi_table_destroy(snapprof__cfi_table_t *t)
{
    if (!t)
        return;
    if (t->dbg)
        dwarf_end(t->dbg); /* frees the Dwarf_CFI too */
    else if (t->cfi)
        dwarf_cfi_end(t->cfi);
    if (t->elf)
        elf_end(t->elf);
    free(t->fdes);
    free(t->rows);
    free(t);
}

int snapprof__cfi_table_open(const snapprof_module_t *m, int eager, snapprof__cfi_table_t **out)
{
    if (!m || m->kind != SNAPPROF_MODULE_NATIVE || !m->path || m->path[0] != '/')
        return -ENOENT;
    if (elf_version(EV_CURRENT) == EV_NONE)
        return -ENOENT;
    snapprof__cfi_table_t *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    uint64_t t0 = cpu_ns();
    t->load_bias = m->load_bias;
    int rc = -ENOENT;
    /* .eh_frame first: it is what the loaded code was linked with and
     * what libunwind reads. */
    t->elf = open_object(m->path, m->build_id);
    if (t->elf && (rc = index_eh_frame(t)) == 0) {
        t->cfi = dwarf_getcfi_elf(t->elf);
        t->source = SNAPPROF__CFI_SOURCE_EH_FRAME;
        if (!t->cfi)
            rc = -ENOENT;
    }
    if (rc == -ENOENT) {
        /* No .eh_frame_hdr: code built without unwind tables, whose CFI is
         * in .debug_frame, maybe in a separate debug file. */
        if (t->elf)
            elf_end(t->elf);
        t->elf = snapprof__symbols_open_frame_elf(m->path, m->build_id ? m->build_id : "");
        t->fde_count = 0;
        if (t->elf)
            t->dbg = dwarf_begin_elf(t->elf, DWARF_C_READ, NULL);
        if (t->dbg)
            t->cfi = dwarf_getcfi(t->dbg);
        if (t->cfi)
            rc = index_debug_frame(t);
        t->source = SNAPPROF__CFI_SOURCE_DEBUG_FRAME;
    }
    if (rc == 0) {
        sort_index(t);
        for (size_t i = 0; eager && rc == 0 && i < t->fde_count; i++)
            rc = compile_fde(t, i);
        t->build_ns += cpu_ns() - t0;
    }
    if (rc != 0) {
        snapprof__cfi_table_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

snapprof__cfi_source_t snapprof__cfi_table_source(const snapprof__cfi_table_t *t)
{
    return t->source;
}

const snapprof__cfi_row_t *snapprof__cfi_table_find(snapprof__cfi_table_t *t, uintptr_t pc)
{
    uint64_t vaddr = (uint64_t)(pc - t->load_bias);
    /* The last FDE starting at or below vaddr. */
    size_t lo = 0, hi = t->fde_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->fdes[mid].start <= vaddr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    fde_t *fde = &t->fdes[lo - 1];
    if (fde->first_row == NOT_COMPILED) {
        uint64_t t0 = cpu_ns();
        int rc = compile_fde(t, lo - 1);
        t->build_ns += cpu_ns() - t0;
        if (rc != 0)
            return NULL;
    }
    if (vaddr >= fde->end || fde->row_count == 0)
        return NULL;
    uint32_t off = (uint32_t)(vaddr - fde->start);
    const snapprof__cfi_row_t *rows = t->rows + fde->first_row;
    /* The last row starting at or below off. */
    size_t a = 0, b = fde->row_count;
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (rows[mid].start <= off)
            a = mid + 1;
        else
            b = mid;
    }
    return a == 0 ? NULL : &rows[a - 1];
}

void snapprof__cfi_table_stats(const snapprof__cfi_table_t *t, snapprof__cfi_table_stats_t *out)
{
    out->fdes = t->fde_count;
    out->fdes_compiled = t->fdes_compiled;
    out->rows = t->row_count;
    out->fallback_rows = t->fallback_rows;
    out->bytes = sizeof *t + t->fde_count * sizeof *t->fdes + t->row_cap * sizeof *t->rows;
    out->build_ns = t->build_ns;
}
