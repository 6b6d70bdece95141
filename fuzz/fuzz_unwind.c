/* libFuzzer harness: the unwinder chain on arbitrary stack copies.
 *
 * Each input is a stack copy, its registers and a chain: any of the six
 * unwinders (JIT, libunwind, .debug_frame, hybrid, frame pointers, CFI
 * tables), alone
 * or chained in any order, over a copy that holds exactly the input's
 * bytes (malloc'd to size, so ASan sees every read past it). Words in the
 * registers and the copy may stand for addresses that move from run to
 * run: a tag in the top byte makes a word point into the copy, into the
 * live stack the copy stands for, into real code (this program's, libc's,
 * snapprof's, code with only .debug_frame) or into a registered JIT region.
 * Three JIT regions are registered, one of each frame layout, and 64
 * CPython perf trampolines, the four shapes in turn every 16 bytes (bit 32
 * of a JIT-tagged word points among them).
 *
 * Checked on every input, besides the sanitizers: every read the CFI
 * engines make lies in the copy or in a readable segment of a loaded
 * object, the chain returns at most max_frames frames, and every marker
 * frame is named. With SNAPPROF_FUZZ_WRITE_SEEDS=DIR the harness writes
 * real stacks of its own (encoded as above) into DIR and exits: that is
 * how fuzz/corpus/unwind/ was made. */
#include "fuzz_util.h"

#include "unwinder/cfi_engine.h"
#include "unwinder/unwinder_internal.h"

#include <snapprof/jit.h>
#include <snapprof/snapprof.h>

#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

/* Code with only .debug_frame CFI (fuzz_unwind_dframe.c). */
int fuzz_dframe_leaf(int x);
int fuzz_dframe_mid(int x, int (*cb)(int));

enum { N_UNWINDERS = 6, MAX_FRAMES = 256 };
static snapprof_unwinder_t *g_unwinders[N_UNWINDERS];

/* Tags in a word's top byte (see decode()). */
#define TAG_COPY 0xA1u
#define TAG_CODE 0xB1u
#define TAG_JIT 0xC1u
#define TAG_LIVE 0xD1u

/* Code that tagged words point into. */
static uintptr_t g_code[16];
static size_t g_code_n;

/* The JIT regions: one per layout, in a reserved range no object holds. */
#define JIT_REGIONS 3
#define JIT_REGION_SIZE 4096u
static uintptr_t g_jit_base;
#define TRAMPOLINES 64
static uintptr_t g_tramp_base;

/* Readable segments of loaded objects, page-rounded. */
#define MAX_SEGS 1024
static struct {
    uintptr_t start, end;
} g_segs[MAX_SEGS];
static size_t g_nsegs;

static int note_segments(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    for (int i = 0; i < info->dlpi_phnum && g_nsegs < MAX_SEGS; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_R))
            continue;
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        g_segs[g_nsegs].start = start & ~(uintptr_t)4095;
        g_segs[g_nsegs].end = (start + ph->p_memsz + 4095) & ~(uintptr_t)4095;
        g_nsegs++;
    }
    return 0;
}

static int seg_cmp(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

/* Joins segments that touch: an object's text and read-only data are
 * mapped back to back, and a word read across the boundary is sound. */
static void merge_segments(void)
{
    qsort(g_segs, g_nsegs, sizeof g_segs[0], seg_cmp);
    size_t n = 0;
    for (size_t i = 0; i < g_nsegs; i++) {
        if (n > 0 && g_segs[i].start <= g_segs[n - 1].end) {
            if (g_segs[i].end > g_segs[n - 1].end)
                g_segs[n - 1].end = g_segs[i].end;
        } else {
            g_segs[n++] = g_segs[i];
        }
    }
    g_nsegs = n;
}

/* The copy being unwound, for the read check. */
static uintptr_t g_bottom, g_top;

static void on_read(void *user_data, uintptr_t addr, size_t size, int from_copy)
{
    (void)user_data;
    if (from_copy) {
        FUZZ_CHECK(addr >= g_bottom && addr + size <= g_top);
        return;
    }
    for (size_t i = 0; i < g_nsegs; i++)
        if (addr >= g_segs[i].start && addr + size <= g_segs[i].end)
            return;
    fprintf(stderr, "read of %zu bytes at %#lx outside the copy and the objects\n", size,
            (unsigned long)addr);
    abort();
}

/* What a word of the input stands for. */
static uintptr_t decode(uint64_t w, uintptr_t bottom, size_t size, uintptr_t orig_bottom)
{
    uint32_t lo = (uint32_t)w;
    switch (w >> 56) {
    case TAG_COPY:
        return bottom + lo % (size + 64) - 32;
    case TAG_LIVE:
        return orig_bottom + lo % (size + 64) - 32;
    case TAG_CODE:
        return g_code[(w >> 32 & 0xff) % g_code_n] + (lo & 0xffff);
    case TAG_JIT:
        if (w >> 32 & 1)
            return g_tramp_base + lo % (TRAMPOLINES * 16 + 16);
        return g_jit_base + lo % (JIT_REGIONS * JIT_REGION_SIZE + 64);
    default:
        return (uintptr_t)w;
    }
}

static int qsort_cmp(const void *a, const void *b)
{
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static void seed_init(void);
static int g_verbose; /* SNAPPROF_FUZZ_VERBOSE: a line per input */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    size_t k = 0;
    g_code[k++] = (uintptr_t)LLVMFuzzerTestOneInput;
    g_code[k++] = (uintptr_t)decode;
    g_code[k++] = (uintptr_t)fuzz_dframe_leaf;
    g_code[k++] = (uintptr_t)fuzz_dframe_mid;
    g_code[k++] = (uintptr_t)qsort_cmp;
    g_code[k++] = (uintptr_t)qsort;
    g_code[k++] = (uintptr_t)memcpy;
    g_code[k++] = (uintptr_t)malloc;
    g_code[k++] = (uintptr_t)snapprof_profiler_start;
    g_code[k++] = (uintptr_t)snapprof__unwind_chain;
    g_code[k++] = (uintptr_t)pthread_create;
    g_code[k++] = (uintptr_t)seed_init;
    g_code_n = k;

    void *jit =
        mmap(NULL, JIT_REGIONS * JIT_REGION_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FUZZ_CHECK(jit != MAP_FAILED);
    g_jit_base = (uintptr_t)jit;
    snapprof_jit_layout_t fp, fixed, fixed_fp;
    snapprof_jit_layout_init_frame_pointer(&fp);
    snapprof_jit_layout_init_fixed(&fixed, 32, 24);
    snapprof_jit_layout_init_fixed(&fixed_fp, 48, 40);
    fixed_fp.saved_fp_offset = 32;
    FUZZ_CHECK(snapprof_jit_region_register(g_jit_base, JIT_REGION_SIZE, "jit_fp", &fp) == 0);
    FUZZ_CHECK(snapprof_jit_region_register(g_jit_base + JIT_REGION_SIZE, JIT_REGION_SIZE,
                                            "jit_fixed", &fixed) == 0);
    FUZZ_CHECK(snapprof_jit_region_register(g_jit_base + 2 * JIT_REGION_SIZE, JIT_REGION_SIZE,
                                            "jit_fixed_fp", &fixed_fp) == 0);
    void *tramp = mmap(NULL, TRAMPOLINES * 16, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FUZZ_CHECK(tramp != MAP_FAILED);
    g_tramp_base = (uintptr_t)tramp;
    snapprof_jit_layout_t cpython;
    snapprof_jit_layout_init_cpython(&cpython);
    static const size_t sizes[] = {11, 15, 8, 12};
    for (size_t t = 0; t < TRAMPOLINES; t++)
        FUZZ_CHECK(snapprof_jit_region_register(g_tramp_base + 16 * t, sizes[t % 4], "py::f:x.py",
                                                &cpython) == 0);

    FUZZ_CHECK(snapprof_jit_unwinder_create(&g_unwinders[0]) == 0);
    FUZZ_CHECK(snapprof_libunwind_unwinder_create(&g_unwinders[1]) == 0);
    FUZZ_CHECK(snapprof_debug_frame_unwinder_create(&g_unwinders[2]) == 0);
    FUZZ_CHECK(snapprof_hybrid_unwinder_create(&g_unwinders[3]) == 0);
    FUZZ_CHECK(snapprof_frame_pointer_unwinder_create(&g_unwinders[4]) == 0);
    FUZZ_CHECK(snapprof_cfi_table_unwinder_create(&g_unwinders[5]) == 0);
    static const snapprof__cfi_seams_t seams = {.xOnRead = on_read};
    snapprof__cfi_set_seams(snapprof__cfi_of(g_unwinders[1]), &seams);
    snapprof__cfi_set_seams(snapprof__cfi_of(g_unwinders[2]), &seams);
    snapprof__cfi_set_seams(snapprof__cfi_of(g_unwinders[3]), &seams);
    snapprof__cfi_set_seams(snapprof__cfi_of(g_unwinders[5]), &seams);
    dl_iterate_phdr(note_segments, NULL);
    merge_segments();
    g_verbose = getenv("SNAPPROF_FUZZ_VERBOSE") != NULL;
    if (getenv("SNAPPROF_FUZZ_WRITE_SEEDS"))
        seed_init();
    return 0;
}

/* Input: [chain: 3 bytes][max_frames][flags][orig_bottom: 8][17 registers:
 * 8 each][the copy]. The chain's first byte gives its length (1-6, or 0
 * for the profiler's default chain: JIT, CFI tables, libunwind,
 * .debug_frame, frame pointers),
 * the next two the unwinders, 3 bits each. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    uint8_t c0 = fuzz_u8(&in);
    unsigned picks = fuzz_u8(&in) | (unsigned)fuzz_u8(&in) << 8;
    uint8_t mf = fuzz_u8(&in);
    uint8_t flags = fuzz_u8(&in);
    uint64_t orig_bottom = fuzz_u64(&in);
    uint64_t raw_regs[SNAPPROF_REG_COUNT];
    for (int r = 0; r < SNAPPROF_REG_COUNT; r++)
        raw_regs[r] = fuzz_u64(&in);

    snapprof_unwinder_t *chain[N_UNWINDERS];
    size_t chain_len = c0 % (N_UNWINDERS + 1);
    if (chain_len == 0) {
        static const int def[] = {0, 5, 1, 2, 4};
        chain_len = 5;
        for (size_t i = 0; i < chain_len; i++)
            chain[i] = g_unwinders[def[i]];
    } else {
        for (size_t i = 0; i < chain_len; i++)
            chain[i] = g_unwinders[(picks >> (3 * i) & 7) % N_UNWINDERS];
    }

    /* Exactly the copy, from malloc (16-byte aligned), so that ASan sees
     * any read past it. */
    size_t copy_size = in.n & ~(size_t)7;
    uint64_t *buf = malloc(copy_size ? copy_size : 8);
    FUZZ_CHECK(buf != NULL);
    uintptr_t bottom = (uintptr_t)buf;
    for (size_t i = 0; i < copy_size / 8; i++) {
        uint64_t w;
        memcpy(&w, in.p + 8 * i, 8);
        buf[i] = decode(w, bottom, copy_size, (uintptr_t)orig_bottom);
    }
    snapprof_stack_copy_t stack = {.bottom = bottom,
                                   .top = bottom + copy_size,
                                   .orig_bottom = (uintptr_t)orig_bottom,
                                   .truncated = flags & 1,
                                   .timestamp_ns = (flags & 2) ? 1 : 0};
    snapprof_regs_t regs;
    for (int r = 0; r < SNAPPROF_REG_COUNT; r++)
        regs.r[r] = decode(raw_regs[r], bottom, copy_size, (uintptr_t)orig_bottom);
    g_bottom = stack.bottom;
    g_top = stack.top;

    for (size_t i = 0; i < chain_len; i++)
        if (chain[i]->ops->xUpdateModules)
            chain[i]->ops->xUpdateModules(chain[i]->user_data);
    size_t max_frames = mf == 0 ? MAX_FRAMES : mf;
    snapprof_frame_t *frames = malloc(max_frames * sizeof *frames);
    FUZZ_CHECK(frames != NULL);
    snapprof__unwind_outcome_t o;
    size_t n = snapprof__unwind_chain(chain, chain_len, &regs, &stack, frames, max_frames, &o);
    FUZZ_CHECK(n <= max_frames);
    FUZZ_CHECK(o.completed + o.aborted + o.truncated_depth + o.unrecognized <= 1);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(frames[i].kind == SNAPPROF_FRAME_NATIVE ||
                   frames[i].kind == SNAPPROF_FRAME_JIT || frames[i].kind == SNAPPROF_FRAME_MARKER);
        if (frames[i].kind != SNAPPROF_FRAME_NATIVE)
            FUZZ_CHECK(frames[i].name != NULL && strlen(frames[i].name) < 4096);
    }
    if (g_verbose)
        fprintf(stderr, "chain of %zu: %zu frames, completed %d aborted %d (%s) capped %d\n",
                chain_len, n, o.completed, o.aborted, o.abort_reason ? o.abort_reason : "",
                o.truncated_depth);
    free(frames);
    free(buf);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Seeds: real stacks of this program, encoded                              */
/* ------------------------------------------------------------------------ */

static const char *g_seed_dir;
static int g_seed_count;
static uintptr_t g_stack_top;

/* The tagged form of a word found at capture, given the copy's bottom. */
static uint64_t encode(uintptr_t w, uintptr_t sp, size_t size)
{
    if (w >= sp && w < sp + size)
        return (uint64_t)TAG_COPY << 56 | (uint64_t)(w - sp + 32);
    for (size_t i = 0; i < g_code_n; i++)
        if (w >= g_code[i] && w - g_code[i] < 0x10000)
            return (uint64_t)TAG_CODE << 56 | (uint64_t)i << 32 | (uint64_t)(w - g_code[i]);
    return w;
}

/* Writes the calling stack (its registers as of this call) as a seed. It
 * reads the live stack, redzones included, as the stack copier does: not
 * instrumented, and word by word rather than through memcpy (which ASan
 * intercepts). */
static __attribute__((noinline, no_sanitize("address"))) void capture(uint8_t chain0, uint8_t picks)
{
    uintptr_t sp, fp, pc, regs[SNAPPROF_REG_COUNT] = {0};
    __asm__ volatile("mov %%rsp, %0\n\tmov %%rbp, %1\n\tlea 0(%%rip), %2"
                     : "=r"(sp), "=r"(fp), "=r"(pc));
    size_t size = g_stack_top - sp;
    if (size > 8192)
        size = 8192;
    size &= ~(size_t)7;
    regs[SNAPPROF_REG_SP] = sp;
    regs[SNAPPROF_REG_FP] = fp;
    regs[SNAPPROF_REG_PC] = pc;
    uint8_t hdr[5] = {chain0, picks, 0, 0, 0};
    char path[4096];
    snprintf(path, sizeof path, "%s/stack-%02d", g_seed_dir, g_seed_count++);
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f != NULL);
    fwrite(hdr, 1, sizeof hdr, f);
    uint64_t ob = 0x7ffd00000000u;
    fwrite(&ob, 8, 1, f);
    for (int r = 0; r < SNAPPROF_REG_COUNT; r++) {
        uint64_t e = encode(regs[r], sp, size);
        fwrite(&e, 8, 1, f);
    }
    for (size_t i = 0; i < size; i += 8) {
        uintptr_t w = *(const volatile uintptr_t *)(sp + i);
        uint64_t e = encode(w, sp, size);
        fwrite(&e, 8, 1, f);
    }
    FUZZ_CHECK(fclose(f) == 0);
}

static int seed_cmp_calls;
static int seed_capture_cmp(const void *a, const void *b)
{
    if (seed_cmp_calls++ == 0) {
        capture(0, 0);          /* the default chain */
        capture(1, 1);          /* libunwind alone */
        capture(1, 3);          /* hybrid alone */
        capture(2, 1 | 4 << 3); /* libunwind, then frame pointers */
        capture(1, 5);          /* CFI tables alone */
    }
    return qsort_cmp(a, b);
}

static int seed_leaf(int x)
{
    capture(1, 2); /* .debug_frame alone */
    capture(0, 0);
    return x + 1;
}

static __attribute__((noinline)) void seed_recurse(int depth)
{
    if (depth > 0) {
        seed_recurse(depth - 1);
        __asm__ volatile("" ::: "memory");
        return;
    }
    capture(0, 0);
    capture(1, 4); /* frame pointers alone */
    int v[8] = {5, 3, 7, 1, 8, 2, 6, 4};
    qsort(v, 8, sizeof v[0], seed_capture_cmp);
    FUZZ_CHECK(fuzz_dframe_mid(3, seed_leaf) > 0);
}

static void seed_init(void)
{
    g_seed_dir = getenv("SNAPPROF_FUZZ_WRITE_SEEDS");
    pthread_attr_t attr;
    void *addr;
    size_t size;
    FUZZ_CHECK(pthread_getattr_np(pthread_self(), &attr) == 0);
    FUZZ_CHECK(pthread_attr_getstack(&attr, &addr, &size) == 0);
    pthread_attr_destroy(&attr);
    g_stack_top = (uintptr_t)addr + size;
    seed_recurse(6);
    printf("wrote %d seeds to %s\n", g_seed_count, g_seed_dir);
    exit(0);
}
