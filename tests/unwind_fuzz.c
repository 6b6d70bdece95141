/* See unwind_fuzz.h. */
#include "unwind_fuzz.h"

#include "test.h"
#include "unwinder/unwinder_internal.h"

#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The readable segments of loaded objects, found independently of the
 * engines, page-rounded as the kernel maps them. */
#define MAX_SEGS 4096
typedef struct seg_list {
    struct {
        uintptr_t start, end;
    } v[MAX_SEGS];
    size_t n;
} seg_list_t;

static int note_segments(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    seg_list_t *segs = data;
    for (int i = 0; i < info->dlpi_phnum && segs->n < MAX_SEGS; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_R))
            continue;
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        segs->v[segs->n].start = start & ~(uintptr_t)4095;
        segs->v[segs->n].end = (start + ph->p_memsz + 4095) & ~(uintptr_t)4095;
        segs->n++;
    }
    return 0;
}

typedef struct read_check {
    const seg_list_t *segs;
    uintptr_t bottom, top; /* the copy being unwound */
    uw_fuzz_result_t *out;
} read_check_t;

static void on_read(void *user_data, uintptr_t addr, size_t size, int from_copy)
{
    read_check_t *r = user_data;
    if (from_copy) {
        r->out->copy_reads++;
        if (addr < r->bottom || addr + size > r->top)
            r->out->bad_reads++;
        return;
    }
    r->out->module_reads++;
    for (size_t i = 0; i < r->segs->n; i++)
        if (addr >= r->segs->v[i].start && addr + size <= r->segs->v[i].end)
            return;
    r->out->bad_reads++;
}

static uint64_t next_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return *s >> 17;
}

/* Noise, a pointer into the copy (aligned or not), into code, or zero. */
static uintptr_t wild_word(const uw_fuzz_spec_t *spec, uint64_t *seed, uintptr_t bottom,
                           size_t size)
{
    uint64_t r = next_rand(seed);
    switch (r % 8) {
    case 0:
        return 0;
    case 1:
    case 2:
        return bottom + (next_rand(seed) % (size + 64)) - 32;
    case 3:
        return (bottom + next_rand(seed) % size) & ~(uintptr_t)15;
    case 4:
    case 5:
        return spec->code[next_rand(seed) % spec->code_count] + next_rand(seed) % spec->code_span;
    case 6:
        return (uintptr_t)next_rand(seed) << 20 | next_rand(seed);
    default:
        return (uintptr_t)r;
    }
}

void uw_fuzz_corrupt_copies(const uw_fuzz_spec_t *spec, uw_fuzz_result_t *out)
{
    memset(out, 0, sizeof *out);
    static seg_list_t segs;
    segs.n = 0;
    dl_iterate_phdr(note_segments, &segs);
    read_check_t check = {.segs = &segs, .out = out};
    snapprof__cfi_seams_t seams = {.xOnRead = on_read, .user_data = &check};
    for (size_t i = 0; i < spec->engine_count; i++)
        snapprof__cfi_set_seams(spec->engines[i], &seams);
    for (size_t k = 0; k < spec->chain_count; k++)
        for (size_t j = 0; j < spec->chain_len[k]; j++) {
            snapprof_unwinder_t *u = spec->chains[k][j];
            if (u->ops->xUpdateModules)
                u->ops->xUpdateModules(u->user_data);
        }
    enum { MAX_FRAMES = 256 };
    snapprof_frame_t frames[MAX_FRAMES];
    for (uint64_t seed = 1; seed <= (uint64_t)spec->seeds; seed++) {
        uint64_t s = seed * 0x9e3779b97f4a7c15u;
        size_t size = (64 + next_rand(&s) % 16384) & ~(size_t)7;
        /* Exactly the copy, from malloc, so ASan sees any read past it. */
        uintptr_t *buf = malloc(size);
        ASSERT_NOT_NULL(buf);
        uintptr_t bottom = (uintptr_t)buf;
        for (size_t i = 0; i < size / 8; i++)
            buf[i] = wild_word(spec, &s, bottom, size);
        snapprof_stack_copy_t stack = {.bottom = bottom,
                                       .top = bottom + size,
                                       .orig_bottom = wild_word(spec, &s, bottom, size),
                                       .truncated = (int)(next_rand(&s) % 2)};
        snapprof_regs_t regs;
        for (int r = 0; r < SNAPPROF_REG_COUNT; r++)
            regs.r[r] = wild_word(spec, &s, bottom, size);
        if (spec->start_count > 0 && next_rand(&s) % 100 < spec->start_pc_percent)
            regs.r[SNAPPROF_REG_PC] = spec->start_pcs[next_rand(&s) % spec->start_count] +
                                      next_rand(&s) % spec->start_span;
        if (spec->sp_in_copy && next_rand(&s) % 2)
            regs.r[SNAPPROF_REG_SP] = bottom + (next_rand(&s) % size & ~(size_t)7);
        check.bottom = stack.bottom;
        check.top = stack.top;
        for (size_t k = 0; k < spec->chain_count; k++) {
            snapprof__unwind_outcome_t o;
            size_t n = snapprof__unwind_chain(spec->chains[k], spec->chain_len[k], &regs, &stack,
                                              frames, 1 + next_rand(&s) % MAX_FRAMES, &o);
            ASSERT_LE(n, MAX_FRAMES);
            out->frames += n;
            if (o.completed)
                out->completed++;
            else if (o.aborted)
                out->aborted++;
            else if (o.truncated_depth)
                out->capped++;
            else
                out->unknown++;
        }
        free(buf);
    }
    for (size_t i = 0; i < spec->engine_count; i++)
        snapprof__cfi_set_seams(spec->engines[i], NULL);
    printf("%d corrupt copies x %zu chains: %zu frames; completed %zu, aborted %zu, capped %zu, "
           "unknown %zu; reads: %zu from copies, %zu from modules, %zu outside\n",
           spec->seeds, spec->chain_count, out->frames, out->completed, out->aborted, out->capped,
           out->unknown, out->copy_reads, out->module_reads, out->bad_reads);
}
