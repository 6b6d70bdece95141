/* The CFI engine: DWARF CFI (.eh_frame) unwinding of the stack copy
 * through libunwind's remote API, with accessors of our own, the way perf's
 * util/unwind-libunwind-local.c unwinds the stacks the kernel copied. The
 * libunwind, hybrid, CFI table and .debug_frame unwinders each own one.
 *
 * The accessors are the safety boundary. access_mem serves the copy
 * [bottom, top) directly and any other address only when it lies in a
 * readable PT_LOAD segment of an object the dynamic loader lists; those
 * reads go through process_vm_readv(2) on our own pid, so an object that
 * is dlclose()d while we unwind turns into a failed read (EFAULT) instead
 * of a crash. Read-only segments are immutable while loaded, so their
 * bytes are kept in a small line cache that is flushed when the set of
 * objects changes. libunwind never sees the live stack, and never runs in
 * the signal handler. */
#include "unwinder/cfi_engine.h"

#include "common/seccomp.h"
#include "module_cache/module_cache.h"

#include <errno.h>
#include <libunwind.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* libunwind exports this but declares it only in its private headers;
 * perf declares it the same way. */
extern int UNW_OBJ(dwarf_search_unwind_table)(unw_addr_space_t as, unw_word_t ip,
                                              unw_dyn_info_t *di, unw_proc_info_t *pi,
                                              int need_unwind_info, void *arg);

/* ------------------------------------------------------------------------ */
/* The table of loaded objects                                              */
/* ------------------------------------------------------------------------ */

/* An address range of one object: a readable segment (memory ranges) or
 * an executable one (code ranges). */
typedef struct cfi_range {
    uintptr_t start, end; /* [start, end) */
    uint32_t object;      /* index into objects[] */
    int writable;         /* memory ranges: the segment is writable */
} cfi_range_t;

typedef struct cfi_object {
    uintptr_t eh_frame_hdr; /* runtime address of .eh_frame_hdr; 0 if none */
    uintptr_t table;        /* its binary-search table; 0 when unusable */
    size_t fde_count;
} cfi_object_t;

typedef struct cfi_table {
    cfi_object_t *objects;
    size_t object_count, object_cap;
    cfi_range_t *mem; /* sorted, merged, page-rounded */
    size_t mem_count, mem_cap;
    cfi_range_t *code; /* sorted */
    size_t code_count, code_cap;
    int oom; /* the scan ran out of memory: the table is incomplete */
} cfi_table_t;

/* Per-pc answers of snapprof__cfi_covers kept: 4096 slots, direct-mapped. */
#define COVER_SLOTS 4096u

/* Bytes of read-only object memory kept per engine: 1024 lines of 64. */
#define LINE_SIZE 64u
#define LINE_COUNT 1024u

struct snapprof__cfi {
    unw_addr_space_t as;
    cfi_table_t table;
    int scanned;                   /* table was built at least once */
    unsigned long long adds, subs; /* loader counters at the last scan */
    int direct_reads;              /* process_vm_readv unavailable */
    unsigned long long raw_reads;  /* reads that went to read_raw */
    snapprof__cfi_seams_t seams;
    uintptr_t cover_pc[COVER_SLOTS];
    uint8_t cover_val[COVER_SLOTS]; /* 0 unknown, 1 no FDE holds cover_pc, 2 one does */
    uintptr_t line_tag[LINE_COUNT]; /* line address | 1 when valid */
    uint8_t line[LINE_COUNT][LINE_SIZE];
};

/* The state of one walk, handed to the accessors as libunwind's arg. */
typedef struct cfi_walk {
    snapprof__cfi_t *cfi;
    const snapprof_stack_copy_t *stack;
    uintptr_t regs[SNAPPROF_REG_COUNT];
    int bad_read; /* a read was refused: outside the copy and the objects */
} cfi_walk_t;

static int grow(void **array, size_t *cap, size_t count, size_t size)
{
    if (count < *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 16;
    void *p = realloc(*array, n * size);
    if (!p)
        return -ENOMEM;
    *array = p;
    *cap = n;
    return 0;
}

static int add_range(cfi_range_t **ranges, size_t *count, size_t *cap, cfi_range_t r)
{
    if (grow((void **)ranges, cap, *count, sizeof **ranges) != 0)
        return -ENOMEM;
    (*ranges)[(*count)++] = r;
    return 0;
}

static int range_cmp(const void *a, const void *b)
{
    const cfi_range_t *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* The range holding addr, or NULL. */
static const cfi_range_t *find_range(const cfi_range_t *r, size_t n, uintptr_t addr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (addr < r[mid].start)
            hi = mid;
        else if (addr >= r[mid].end)
            lo = mid + 1;
        else
            return &r[mid];
    }
    return NULL;
}

/* Whether [addr, addr + size) lies in one readable segment of obj.
 * Used while the loader lock is held, before the table is sorted. */
static int in_segments(const struct dl_phdr_info *info, uintptr_t addr, size_t size)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_R))
            continue;
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (addr >= start && size <= ph->p_memsz && addr - start <= ph->p_memsz - size)
            return 1;
    }
    return 0;
}

/* Reads a DWARF-encoded value of the formats .eh_frame_hdr uses for its
 * header fields (absolute or pc-relative, 2/4/8 bytes). Returns the bytes
 * consumed, or 0 for formats we do not take. The bytes were checked to lie
 * in the object's readable segments. */
static size_t read_encoded(const struct dl_phdr_info *info, uintptr_t p, uint8_t enc,
                           uintptr_t *out)
{
    size_t size;
    uint64_t v = 0;
    switch (enc & 0x0f) {
    case 0x00: /* DW_EH_PE_absptr */
    case 0x04: /* udata8 */
    case 0x0c: /* sdata8 */
        size = 8;
        break;
    case 0x03: /* udata4 */
    case 0x0b: /* sdata4 */
        size = 4;
        break;
    case 0x02: /* udata2 */
    case 0x0a: /* sdata2 */
        size = 2;
        break;
    default:
        return 0;
    }
    if (!in_segments(info, p, size))
        return 0;
    if (size == 8) {
        memcpy(&v, (const void *)p, 8);
    } else if (size == 4) {
        uint32_t u;
        memcpy(&u, (const void *)p, 4);
        v = (enc & 0x08) ? (uint64_t)(int64_t)(int32_t)u : u;
    } else {
        uint16_t u;
        memcpy(&u, (const void *)p, 2);
        v = (enc & 0x08) ? (uint64_t)(int64_t)(int16_t)u : u;
    }
    switch (enc & 0x70) {
    case 0x00: /* absolute */
        break;
    case 0x10: /* DW_EH_PE_pcrel */
        v += p;
        break;
    default:
        return 0;
    }
    if (enc & 0x80) /* DW_EH_PE_indirect: never used in a header */
        return 0;
    *out = (uintptr_t)v;
    return size;
}

/* Finds the binary-search table of .eh_frame_hdr at hdr (version 1, table
 * encoded DW_EH_PE_datarel | DW_EH_PE_sdata4, which is what
 * dwarf_search_unwind_table can search). Runs inside dl_iterate_phdr, so
 * the object cannot be unmapped while its bytes are read here. */
static void parse_eh_frame_hdr(const struct dl_phdr_info *info, uintptr_t hdr, cfi_object_t *obj)
{
    if (!in_segments(info, hdr, 4))
        return;
    const uint8_t *h = (const uint8_t *)hdr;
    uint8_t version = h[0], eh_frame_ptr_enc = h[1], fde_count_enc = h[2], table_enc = h[3];
    if (version != 1 || table_enc != 0x3b || eh_frame_ptr_enc == 0xff || fde_count_enc == 0xff)
        return;
    uintptr_t p = hdr + 4, eh_frame, count;
    size_t n = read_encoded(info, p, eh_frame_ptr_enc, &eh_frame);
    if (n == 0)
        return;
    p += n;
    n = read_encoded(info, p, fde_count_enc, &count);
    if (n == 0)
        return;
    p += n;
    if (count == 0 || count > (SIZE_MAX / 8) || !in_segments(info, p, count * 8))
        return;
    obj->eh_frame_hdr = hdr;
    obj->table = p;
    obj->fde_count = count;
}

static int scan_object(struct dl_phdr_info *info, size_t size, void *data)
{
    cfi_table_t *t = data;
    (void)size;
    if (grow((void **)&t->objects, &t->object_cap, t->object_count, sizeof *t->objects) != 0) {
        t->oom = 1;
        return 1; /* stop: the caller drops the short table */
    }
    uint32_t index = (uint32_t)t->object_count;
    cfi_object_t *obj = &t->objects[t->object_count++];
    memset(obj, 0, sizeof *obj);
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t mask = (uintptr_t)(page > 0 ? page : 4096) - 1;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_GNU_EH_FRAME) {
            parse_eh_frame_hdr(info, start, obj);
        } else if (ph->p_type == PT_LOAD && ph->p_memsz > 0) {
            if (ph->p_flags & PF_R) {
                /* The loader maps whole pages. */
                cfi_range_t r = {.start = start & ~mask,
                                 .end = (start + ph->p_memsz + mask) & ~mask,
                                 .object = index,
                                 .writable = (ph->p_flags & PF_W) != 0};
                if (add_range(&t->mem, &t->mem_count, &t->mem_cap, r) != 0) {
                    t->oom = 1;
                    return 1;
                }
            }
            if (ph->p_flags & PF_X) {
                cfi_range_t r = {.start = start, .end = start + ph->p_memsz, .object = index};
                if (add_range(&t->code, &t->code_count, &t->code_cap, r) != 0) {
                    t->oom = 1;
                    return 1;
                }
            }
        }
    }
    return 0;
}

static void table_free(cfi_table_t *t)
{
    free(t->objects);
    free(t->mem);
    free(t->code);
    memset(t, 0, sizeof *t);
}

/* Sorts the ranges and merges overlapping memory ranges (page rounding
 * can make neighbouring segments share a page); a merged range is
 * writable when any part of it is. */
static void table_finish(cfi_table_t *t)
{
    qsort(t->mem, t->mem_count, sizeof *t->mem, range_cmp);
    qsort(t->code, t->code_count, sizeof *t->code, range_cmp);
    size_t out = 0;
    for (size_t i = 0; i < t->mem_count; i++) {
        /* Overlapping ranges merge (writable if either is); ranges that
         * only touch merge when both are read-only or both writable: an
         * object's read-only segments sit next to its writable one, and
         * merging them would make the whole object uncacheable. */
        cfi_range_t *prev = out > 0 ? &t->mem[out - 1] : NULL;
        if (prev && (t->mem[i].start < prev->end ||
                     (t->mem[i].start == prev->end && t->mem[i].writable == prev->writable))) {
            if (t->mem[i].end > prev->end)
                prev->end = t->mem[i].end;
            prev->writable |= t->mem[i].writable;
        } else {
            t->mem[out++] = t->mem[i];
        }
    }
    t->mem_count = out;
}

static int read_counters(struct dl_phdr_info *info, size_t size, void *data)
{
    unsigned long long *c = data;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        c[0] = info->dlpi_adds;
        c[1] = info->dlpi_subs;
    }
    return 1; /* the counters are the same in every entry: stop */
}

static void flush_caches(snapprof__cfi_t *c)
{
    memset(c->line_tag, 0, sizeof c->line_tag);
    memset(c->cover_val, 0, sizeof c->cover_val);
    unw_flush_cache(c->as, 0, 0);
}

int snapprof__cfi_update_modules(snapprof__cfi_t *c)
{
    /* Through the module cache's fork() gate: this runs on the sampling
     * thread at every drain of heap samples, and a fork child of a moment
     * inside dl_iterate_phdr() would inherit the loader's lock held for
     * good (soak finding 7). In a fork, the old table serves this once. */
    unsigned long long counters[2] = {0, 0};
    if (!snapprof__module_loader_iterate(read_counters, counters))
        return 0;
    if (c->scanned && counters[0] == c->adds && counters[1] == c->subs)
        return 0;
    cfi_table_t t = {0};
    if (!snapprof__module_loader_iterate(scan_object, &t)) {
        table_free(&t); /* a fork() came between the two calls */
        return 0;
    }
    if (t.oom) {
        /* Keep the old table and try again on the next call; reads of an
         * object that went away fail in process_vm_readv, and nothing
         * cached about it survives. */
        table_free(&t);
        flush_caches(c);
        return 0;
    }
    /* The counters were read before the scan: if an object came or went in
     * between, they differ on the next call, which scans once more. */
    c->adds = counters[0];
    c->subs = counters[1];
    table_finish(&t);
    table_free(&c->table);
    c->table = t;
    c->scanned = 1;
    flush_caches(c);
    return 1;
}

int snapprof__cfi_in_code(snapprof__cfi_t *c, uintptr_t pc)
{
    if (!c->scanned)
        snapprof__cfi_update_modules(c);
    return find_range(c->table.code, c->table.code_count, pc) != NULL;
}

/* Searches the .eh_frame_hdr table of the object whose code range is r
 * for ip, reading through the accessors with arg. */
static int search_table(snapprof__cfi_t *c, const cfi_range_t *r, unw_word_t ip,
                        unw_proc_info_t *pi, int need_unwind_info, void *arg)
{
    const cfi_object_t *obj = &c->table.objects[r->object];
    unw_dyn_info_t di;
    memset(&di, 0, sizeof di);
    di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
    di.start_ip = r->start;
    di.end_ip = r->end;
    di.u.rti.segbase = obj->eh_frame_hdr;
    di.u.rti.table_data = obj->table;
    /* In words, as libunwind counts it; each entry is two int32s. */
    di.u.rti.table_len = obj->fde_count * 8 / sizeof(unw_word_t);
    return UNW_OBJ(dwarf_search_unwind_table)(c->as, ip, &di, pi, need_unwind_info, arg);
}

static size_t cover_slot(uintptr_t pc)
{
    return (size_t)((pc * 0x9e3779b97f4a7c15ull) >> 52) % COVER_SLOTS;
}

int snapprof__cfi_covers(snapprof__cfi_t *c, uintptr_t pc)
{
    if (!c->scanned)
        snapprof__cfi_update_modules(c);
    const cfi_range_t *r = find_range(c->table.code, c->table.code_count, pc);
    if (!r || c->table.objects[r->object].table == 0)
        return 0;
    /* A table need not cover all of its object's code: an executable built
     * with -fno-asynchronous-unwind-tables still has FDEs for _start and
     * its PLT. So the table is asked about pc (without building the unwind
     * info, which allocates), once per pc. */
    size_t slot = cover_slot(pc);
    if (c->cover_val[slot] != 0 && c->cover_pc[slot] == pc)
        return c->cover_val[slot] == 2;
    static const snapprof_stack_copy_t no_stack = {0};
    cfi_walk_t w = {.cfi = c, .stack = &no_stack};
    unw_proc_info_t pi;
    memset(&pi, 0, sizeof pi);
    int covered = search_table(c, r, (unw_word_t)pc, &pi, 0, &w) == 0;
    if (!w.bad_read) { /* a failed read says nothing about the code */
        c->cover_pc[slot] = pc;
        c->cover_val[slot] = covered ? 2 : 1;
    }
    return covered;
}

int snapprof__cfi_function_start(snapprof__cfi_t *c, uintptr_t pc, uintptr_t *start)
{
    if (!c->scanned)
        snapprof__cfi_update_modules(c);
    const cfi_range_t *r = find_range(c->table.code, c->table.code_count, pc);
    if (r == NULL)
        return -1;
    static const snapprof_stack_copy_t no_stack = {0};
    cfi_walk_t w = {.cfi = c, .stack = &no_stack};
    unw_proc_info_t pi;
    memset(&pi, 0, sizeof pi);
    if (search_table(c, r, (unw_word_t)pc, &pi, 0, &w) != 0 || pi.start_ip > pc)
        return -1;
    *start = (uintptr_t)pi.start_ip;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Memory                                                                   */
/* ------------------------------------------------------------------------ */

/* Reads size bytes of our own address space without trusting that they are
 * still mapped. Returns 0 or -1. */
static int read_raw(snapprof__cfi_t *c, uintptr_t addr, void *out, size_t size)
{
    c->raw_reads++;
    if (c->direct_reads) {
        /* Only when the kernel refuses process_vm_readv; the address was
         * checked against the loader's list just before. */
        memcpy(out, (const void *)addr, size);
        return 0;
    }
    struct iovec local = {out, size}, remote = {(void *)addr, size};
    return snapprof__process_vm_readv(getpid(), &local, 1, &remote, 1) == (ssize_t)size ? 0 : -1;
}

/* The LINE_SIZE bytes at line (aligned) of a read-only segment, from the
 * line cache or read into it; NULL when they cannot be read. A line never
 * crosses a page, so a line holding a byte of a segment lies in its
 * mapping. */
static const uint8_t *cached_line(snapprof__cfi_t *c, uintptr_t line)
{
    size_t slot = (line / LINE_SIZE) % LINE_COUNT;
    if (c->line_tag[slot] != (line | 1u)) {
        if (read_raw(c, line, c->line[slot], LINE_SIZE) != 0) {
            c->line_tag[slot] = 0;
            return NULL;
        }
        c->line_tag[slot] = line | 1u;
    }
    return c->line[slot];
}

/* Reads a word of a loaded object's memory, or returns -1 when addr is not
 * in one of their readable segments (or no longer mapped). */
static int read_object_word(snapprof__cfi_t *c, uintptr_t addr, unw_word_t *out)
{
    const cfi_range_t *r = find_range(c->table.mem, c->table.mem_count, addr);
    if (!r || r->end - addr < sizeof *out)
        return -1;
    if (r->writable)
        return read_raw(c, addr, out, sizeof *out);
    /* A word may straddle two lines (tables are only 4-byte aligned): it
     * takes both, each from the cache. */
    uintptr_t offset = addr % LINE_SIZE;
    size_t first = offset + sizeof *out <= LINE_SIZE ? sizeof *out : LINE_SIZE - offset;
    const uint8_t *a = cached_line(c, addr - offset);
    if (!a)
        return -1;
    memcpy(out, a + offset, first);
    if (first < sizeof *out) {
        const uint8_t *b = cached_line(c, addr - offset + LINE_SIZE);
        if (!b)
            return -1;
        memcpy((uint8_t *)out + first, b, sizeof *out - first);
    }
    return 0;
}

unsigned long long snapprof__cfi_raw_reads(const snapprof__cfi_t *c)
{
    return c->raw_reads;
}

int snapprof__cfi_read_word(snapprof__cfi_t *c, const snapprof_stack_copy_t *s, uintptr_t addr,
                            uintptr_t *out)
{
    size_t size = s->top - s->bottom;
    uintptr_t a = addr;
    /* A live stack address that escaped rebasing stands for the same byte
     * of the copy. */
    if (a - s->orig_bottom < size && !(a - s->bottom < size))
        a = a - s->orig_bottom + s->bottom;
    if (size >= sizeof *out && a >= s->bottom && a - s->bottom <= size - sizeof *out) {
        memcpy(out, (const void *)a, sizeof *out);
        if (c->seams.xOnRead)
            c->seams.xOnRead(c->seams.user_data, a, sizeof *out, 1);
        return 0;
    }
    unw_word_t v;
    if (read_object_word(c, a, &v) == 0) {
        *out = (uintptr_t)v;
        if (c->seams.xOnRead)
            c->seams.xOnRead(c->seams.user_data, a, sizeof *out, 0);
        return 0;
    }
    return -1;
}

static int access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *valp, int write, void *arg)
{
    cfi_walk_t *w = arg;
    (void)as;
    if (write)
        return -UNW_EINVAL;
    uintptr_t v;
    if (snapprof__cfi_read_word(w->cfi, w->stack, (uintptr_t)addr, &v) == 0) {
        *valp = (unw_word_t)v;
        return 0;
    }
    w->bad_read = 1;
    return -UNW_EINVAL;
}

/* ------------------------------------------------------------------------ */
/* The other accessors                                                      */
/* ------------------------------------------------------------------------ */

static int access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *valp, int write, void *arg)
{
    cfi_walk_t *w = arg;
    (void)as;
    if (write)
        return -UNW_EREADONLYREG;
    /* Our registers are in DWARF numbering, which is libunwind's
     * UNW_X86_64_* numbering too. */
    if (reg < 0 || reg >= SNAPPROF_REG_COUNT)
        return -UNW_EBADREG;
    *valp = w->regs[reg];
    return 0;
}

static int access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
                        void *arg)
{
    (void)as, (void)reg, (void)val, (void)write, (void)arg;
    return -UNW_EBADREG; /* not captured, and unwinding does not need them */
}

static int find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi,
                          int need_unwind_info, void *arg)
{
    cfi_walk_t *w = arg;
    const cfi_table_t *t = &w->cfi->table;
    (void)as; /* the engine's own */
    const cfi_range_t *r = find_range(t->code, t->code_count, (uintptr_t)ip);
    if (!r || t->objects[r->object].table == 0)
        return -UNW_ENOINFO;
    return search_table(w->cfi, r, ip, pi, need_unwind_info, arg);
}

static void put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
    /* dwarf_search_unwind_table returns UNW_INFO_FORMAT_TABLE info from
     * libunwind's own pool, and libunwind returns it there itself (see
     * put_unwind_info in its dwarf/Gparser.c); it calls this hook only for
     * dynamic info, which get_dyn_info_list_addr says we do not have. So
     * there is nothing of ours to free. */
    (void)as, (void)pi, (void)arg;
}

static int get_dyn_info_list_addr(unw_addr_space_t as, unw_word_t *dilap, void *arg)
{
    (void)as, (void)dilap, (void)arg;
    return -UNW_ENOINFO; /* no _U_dyn_register()ed code */
}

static int resume(unw_addr_space_t as, unw_cursor_t *c, void *arg)
{
    (void)as, (void)c, (void)arg;
    return -UNW_EINVAL; /* we only look at stacks */
}

static int get_proc_name(unw_addr_space_t as, unw_word_t addr, char *buf, size_t len,
                         unw_word_t *offp, void *arg)
{
    (void)as, (void)addr, (void)buf, (void)len, (void)offp, (void)arg;
    return -UNW_ENOINFO; /* the module cache symbolizes */
}

static unw_accessors_t accessors = {
    .find_proc_info = find_proc_info,
    .put_unwind_info = put_unwind_info,
    .get_dyn_info_list_addr = get_dyn_info_list_addr,
    .access_mem = access_mem,
    .access_reg = access_reg,
    .access_fpreg = access_fpreg,
    .resume = resume,
    .get_proc_name = get_proc_name,
};

/* ------------------------------------------------------------------------ */
/* The engine                                                               */
/* ------------------------------------------------------------------------ */

int snapprof__cfi_create(snapprof__cfi_t **out)
{
    snapprof__cfi_t *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->as = unw_create_addr_space(&accessors, 0);
    if (!c->as) {
        free(c);
        return -ENOMEM;
    }
    /* The address space belongs to this engine and only its thread uses
     * it; caching keeps the parsed CFI rows per pc, so steady-state steps
     * read only the stack. */
    unw_set_caching_policy(c->as, UNW_CACHE_GLOBAL);
    /* process_vm_readv may be filtered (seccomp) or missing; then fall back
     * to plain reads of the validated ranges, which is what perf does. */
    static const uint64_t probe = 0x534e4150u;
    uint64_t got = 0;
    if (read_raw(c, (uintptr_t)&probe, &got, sizeof got) != 0 || got != probe)
        c->direct_reads = 1;
    *out = c;
    return 0;
}

void snapprof__cfi_destroy(snapprof__cfi_t *c)
{
    if (!c)
        return;
    unw_destroy_addr_space(c->as);
    table_free(&c->table);
    free(c);
}

void snapprof__cfi_set_seams(snapprof__cfi_t *c, const snapprof__cfi_seams_t *seams)
{
    if (seams)
        c->seams = *seams;
    else
        memset(&c->seams, 0, sizeof c->seams);
}

static snapprof__reason_t reason_of(int rc, const cfi_walk_t *w)
{
    if (w->bad_read)
        return SNAPPROF__REASON_MEMORY;
    switch (-rc) {
    case UNW_ENOINFO:
        return SNAPPROF__REASON_NO_INFO;
    case UNW_EBADFRAME:
    case UNW_EINVALIDIP:
    case UNW_EBADREG:
    case UNW_EINVAL:
        return SNAPPROF__REASON_CFI_BAD_FRAME;
    default:
        return SNAPPROF__REASON_LIBUNWIND;
    }
}

static void init_walk(cfi_walk_t *w, snapprof__cfi_t *c, const snapprof_stack_copy_t *stack,
                      const snapprof_regs_t *regs, uintptr_t lookup_pc)
{
    w->cfi = c;
    w->stack = stack;
    memcpy(w->regs, regs->r, sizeof w->regs);
    /* libunwind looks up its first frame at exactly this pc; for a caller
     * frame that is return address - 1, inside the call, as it should be. */
    w->regs[SNAPPROF_REG_PC] = lookup_pc;
    w->bad_read = 0;
}

/* Copies what the cursor knows about the current frame into regs. */
static void regs_from_cursor(unw_cursor_t *cur, snapprof_regs_t *regs)
{
    static const int kept[] = {UNW_X86_64_RBX, UNW_X86_64_RBP, UNW_X86_64_RSP, UNW_X86_64_R12,
                               UNW_X86_64_R13, UNW_X86_64_R14, UNW_X86_64_R15, UNW_X86_64_RIP};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        unw_word_t v;
        if (unw_get_reg(cur, kept[i], &v) == 0)
            regs->r[kept[i]] = (uintptr_t)v;
    }
}

snapprof_unwind_result_t snapprof__cfi_walk(snapprof__cfi_t *c, snapprof_unwind_ctx_t *ctx)
{
    if (!c->scanned)
        snapprof__cfi_update_modules(c);
    cfi_walk_t w;
    init_walk(&w, c, ctx->stack, &ctx->regs, ctx->frames[ctx->frame_count - 1].pc);
    unw_cursor_t cur;
    int rc = unw_init_remote(&cur, c->as, &w);
    if (rc < 0)
        return snapprof__unwind_abort(ctx, reason_of(rc, &w));
    /* Frame 0 has the exact interrupted pc; callers that some unwinder
     * pushed have return address - 1. */
    int last_adjusted = ctx->frame_count > 1;
    uintptr_t prev_sp = ctx->regs.r[SNAPPROF_REG_SP];
    for (;;) {
        rc = unw_step(&cur);
        if (rc == 0)
            return SNAPPROF_UNWIND_COMPLETED; /* the CFI marks the outermost frame */
        if (rc < 0)
            return snapprof__unwind_abort(ctx, reason_of(rc, &w));
        unw_word_t ip = 0, sp = 0;
        unw_get_reg(&cur, UNW_REG_IP, &ip);
        unw_get_reg(&cur, UNW_REG_SP, &sp);
        if (ip == 0)
            return SNAPPROF_UNWIND_COMPLETED;
        /* Every caller's frame lies above its callee's, signal frames too;
         * this also ends any cycle corrupt data could make. */
        if (sp <= prev_sp)
            return snapprof__unwind_abort(ctx, SNAPPROF__REASON_SP_ORDER);
        prev_sp = sp;
        /* After stepping through a signal trampoline the pc is where the
         * signal interrupted: exact, not a return address. The trampoline
         * itself was entered by a "return" to its first byte, so it gets its
         * exact address back too (return address - 1 lies before it). */
        int sig = unw_is_signal_frame(&cur) > 0;
        if (sig && last_adjusted)
            ctx->frames[ctx->frame_count - 1].pc += 1;
        uintptr_t pc = sig ? (uintptr_t)ip : (uintptr_t)ip - 1;
        if (snapprof_unwind_push_frame(ctx, pc, SNAPPROF_FRAME_NATIVE, NULL) != 0) {
            regs_from_cursor(&cur, &ctx->regs);
            return SNAPPROF_UNWIND_ABORTED; /* depth cap; the chain notices */
        }
        last_adjusted = !sig;
        const snapprof_frame_t *f = &ctx->frames[ctx->frame_count - 1];
        if (!snapprof__cfi_covers(c, pc) ||
            (f->module && f->module->kind != SNAPPROF_MODULE_NATIVE)) {
            /* JIT code, or an object without CFI: another unwinder's. */
            regs_from_cursor(&cur, &ctx->regs);
            return SNAPPROF_UNWIND_UNRECOGNIZED_FRAME;
        }
    }
}

int snapprof__cfi_step(snapprof__cfi_t *c, const snapprof_stack_copy_t *stack,
                       snapprof_regs_t *regs, uintptr_t lookup_pc, snapprof__cfi_step_t *out,
                       snapprof__reason_t *reason)
{
    if (!c->scanned)
        snapprof__cfi_update_modules(c);
    cfi_walk_t w;
    init_walk(&w, c, stack, regs, lookup_pc);
    unw_cursor_t cur;
    int rc = unw_init_remote(&cur, c->as, &w);
    if (rc >= 0)
        rc = unw_step(&cur);
    if (rc < 0) {
        *reason = reason_of(rc, &w);
        return -1;
    }
    if (rc == 0)
        return 0;
    unw_word_t ip = 0, sp = 0;
    unw_get_reg(&cur, UNW_REG_IP, &ip);
    unw_get_reg(&cur, UNW_REG_SP, &sp);
    if (ip == 0)
        return 0;
    uintptr_t old_sp = regs->r[SNAPPROF_REG_SP], old_fp = regs->r[SNAPPROF_REG_FP];
    if (sp <= old_sp) {
        *reason = SNAPPROF__REASON_SP_ORDER;
        return -1;
    }
    out->ip = (uintptr_t)ip;
    out->signal = unw_is_signal_frame(&cur) > 0;
    /* A standard frame record: the caller's rbp was saved at CFA - 16, which
     * is where this frame's rbp pointed, and the return address above it. */
    unw_save_loc_t fp_loc, ra_loc;
    out->frame_record = !out->signal && old_fp + 16 == (uintptr_t)sp &&
                        unw_get_save_loc(&cur, UNW_X86_64_RBP, &fp_loc) == 0 &&
                        fp_loc.type == UNW_SLT_MEMORY && fp_loc.u.addr == old_fp &&
                        unw_get_save_loc(&cur, UNW_X86_64_RIP, &ra_loc) == 0 &&
                        ra_loc.type == UNW_SLT_MEMORY && ra_loc.u.addr == old_fp + 8;
    regs_from_cursor(&cur, regs);
    return 1;
}
