/* Tests of the JIT unwinder on stack copies built by hand: native and JIT
 * frames of both layouts interleaved, bad JIT frames, the depth cap, and a
 * copy unwound after its JIT code was replaced. */
#include "test.h"
#include "test_jit_util.h"
#include "test_util.h"

#include "unwinder/unwinder_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

/* Native return addresses must lie in a native module: this code's own. */
__attribute__((noinline)) void jit_unwind_test_code(void)
{
    __asm__ volatile("nop; nop; nop; nop; nop; nop; nop; nop");
}
#define NATIVE(i) ((uintptr_t)&jit_unwind_test_code + 1 + (uintptr_t)(i))

#define WORDS 1024
static uintptr_t g_stack[WORDS] __attribute__((aligned(16)));
#define W(i) ((uintptr_t)&g_stack[i])

/* Three JIT functions: j1 and j3 with frame pointers, j2 with a fixed frame
 * (32 bytes, return address at 24, rbp saved at 16). */
static uintptr_t g_j1, g_j2, g_j3;

static void register_code(void)
{
    uint8_t *code = tj_map(4096);
    g_j1 = (uintptr_t)code;
    g_j2 = g_j1 + 256;
    g_j3 = g_j1 + 512;
    snapprof_jit_layout_t fixed = tj_fixed_layout();
    ASSERT_OK(snapprof_jit_region_register(g_j1, 256, "j1", NULL));
    ASSERT_OK(snapprof_jit_region_register(g_j2, 256, "j2", &fixed));
    ASSERT_OK(snapprof_jit_region_register(g_j3, 256, "j3", NULL));
}

static snapprof_stack_copy_t whole_stack(void)
{
    snapprof_stack_copy_t s = {.bottom = W(0), .top = W(WORDS), .orig_bottom = W(0)};
    return s;
}

/* Unwinds with the chain [jit, frame pointer]. */
/* Registers with only pc, sp and fp set. */
static snapprof_regs_t regs_at(uintptr_t pc, uintptr_t sp, uintptr_t fp)
{
    snapprof_regs_t regs = {{0}};
    regs.r[SNAPPROF_REG_PC] = pc;
    regs.r[SNAPPROF_REG_SP] = sp;
    regs.r[SNAPPROF_REG_FP] = fp;
    return regs;
}

static size_t unwind(const snapprof_regs_t *regs, snapprof_stack_copy_t stack,
                     snapprof_frame_t *frames, size_t max, snapprof__unwind_outcome_t *out)
{
    snapprof_unwinder_t *chain[2];
    ASSERT_OK(snapprof_jit_unwinder_create(&chain[0]));
    ASSERT_OK(snapprof_frame_pointer_unwinder_create(&chain[1]));
    size_t n = snapprof__unwind_chain(chain, 2, regs, &stack, frames, max, out);
    snapprof_unwinder_destroy(chain[0]);
    snapprof_unwinder_destroy(chain[1]);
    return n;
}

static void expect_jit(const snapprof_frame_t *f, uintptr_t pc, const char *name)
{
    ASSERT_UEQ(f->pc, pc);
    ASSERT_EQ(f->kind, SNAPPROF_FRAME_JIT);
    ASSERT_STR_EQ(f->name, name);
    ASSERT_NOT_NULL(f->module);
    ASSERT_EQ(f->module->kind, SNAPPROF_MODULE_JIT);
}

static void expect_native(const snapprof_frame_t *f, uintptr_t pc)
{
    ASSERT_UEQ(f->pc, pc);
    ASSERT_EQ(f->kind, SNAPPROF_FRAME_NATIVE);
    ASSERT_STR_EQ(tu_frame_name(f), "jit_unwind_test_code");
}

/* j1 <- native <- j2 (fixed, rbp junk) <- native <- j3 <- native <- native. */
static snapprof_regs_t build_interleaved(void)
{
    memset(g_stack, 0, sizeof g_stack);
    /* j1's frame record; its caller is native code whose record is at 32. */
    g_stack[16] = W(32);
    g_stack[17] = NATIVE(1);
    /* The native frame was called by j2, which keeps junk in rbp. */
    g_stack[32] = 0x5a5a5a5a;
    g_stack[33] = g_j2 + 11;
    /* j2's fixed frame is [34, 38): rbp saved at +16, return at +24. */
    g_stack[36] = W(48);
    g_stack[37] = NATIVE(2);
    /* Native frame record at 48, called from j3. */
    g_stack[48] = W(64);
    g_stack[49] = g_j3 + 21;
    /* j3's record at 64, called from native code, itself called from
     * native code whose record ends the chain. */
    g_stack[64] = W(80);
    g_stack[65] = NATIVE(3);
    g_stack[80] = 0;
    g_stack[81] = NATIVE(4);
    snapprof_regs_t regs = regs_at(g_j1 + 7, W(8), W(16));
    return regs;
}

static void test_interleaved(void)
{
    register_code();
    snapprof_regs_t regs = build_interleaved();
    snapprof_frame_t frames[32];
    snapprof__unwind_outcome_t out;
    size_t n = unwind(&regs, whole_stack(), frames, 32, &out);
    ASSERT_EQ(out.completed, 1);
    ASSERT_EQ(n, 7);
    expect_jit(&frames[0], g_j1 + 7, "j1");
    expect_native(&frames[1], NATIVE(1) - 1);
    expect_jit(&frames[2], g_j2 + 10, "j2");
    expect_native(&frames[3], NATIVE(2) - 1);
    expect_jit(&frames[4], g_j3 + 20, "j3");
    expect_native(&frames[5], NATIVE(3) - 1);
    expect_native(&frames[6], NATIVE(4) - 1);
}

/* The frame-pointer unwinder alone stops at JIT code and says so. */
static void test_without_jit_unwinder(void)
{
    register_code();
    snapprof_regs_t regs = build_interleaved();
    regs.r[SNAPPROF_REG_PC] = NATIVE(0);
    regs.r[SNAPPROF_REG_FP] = W(32);
    snapprof_unwinder_t *fp;
    ASSERT_OK(snapprof_frame_pointer_unwinder_create(&fp));
    snapprof_stack_copy_t stack = whole_stack();
    snapprof_frame_t frames[16];
    snapprof__unwind_outcome_t out;
    size_t n = snapprof__unwind_chain(&fp, 1, &regs, &stack, frames, 16, &out);
    snapprof_unwinder_destroy(fp);
    ASSERT_EQ(out.unrecognized, 1);
    ASSERT_EQ(n, 3);
    expect_jit(&frames[1], g_j2 + 10, "j2"); /* named, though nobody walks it */
    ASSERT_STR_EQ(frames[2].name, "[unknown]");
}

static void expect_abort(snapprof_regs_t regs, snapprof_stack_copy_t stack, const char *reason)
{
    snapprof_frame_t frames[16];
    snapprof__unwind_outcome_t out;
    size_t n = unwind(&regs, stack, frames, 16, &out);
    ASSERT_EQ(out.aborted, 1);
    ASSERT_STR_EQ(out.abort_reason, reason);
    ASSERT_EQ(frames[n - 1].kind, SNAPPROF_FRAME_MARKER);
    ASSERT_STR_EQ(frames[n - 1].name, "[unwind error]");
}

static void test_bad_frames(void)
{
    register_code();
    snapprof_regs_t regs = regs_at(g_j1, W(8), W(WORDS) + 64);
    expect_abort(regs, whole_stack(), "frame pointer outside the stack");
    regs.r[SNAPPROF_REG_FP] = W(WORDS - 1); /* the record would straddle the top */
    expect_abort(regs, whole_stack(), "frame pointer outside the stack");
    regs.r[SNAPPROF_REG_FP] = 0;
    expect_abort(regs, whole_stack(), "frame pointer outside the stack");
    regs.r[SNAPPROF_REG_FP] = W(16) + 4;
    expect_abort(regs, whole_stack(), "misaligned frame pointer");
    regs.r[SNAPPROF_REG_FP] = W(4);
    expect_abort(regs, whole_stack(), "frame pointer below the stack pointer");
    g_stack[16] = W(16); /* points to itself */
    g_stack[17] = NATIVE(1);
    regs.r[SNAPPROF_REG_FP] = W(16);
    expect_abort(regs, whole_stack(), "frame pointers do not increase");

    /* A fixed frame must fit in the copy and be word-aligned. */
    regs.r[SNAPPROF_REG_PC] = g_j2;
    regs.r[SNAPPROF_REG_SP] = W(WORDS - 2);
    expect_abort(regs, whole_stack(), "stack pointer outside the stack");
    regs.r[SNAPPROF_REG_SP] = W(8) + 4;
    expect_abort(regs, whole_stack(), "misaligned stack pointer");
    regs.r[SNAPPROF_REG_SP] = W(WORDS) + 8;
    expect_abort(regs, whole_stack(), "stack pointer outside the stack");

    /* A JIT frame whose return address is 0 is the outermost. */
    memset(g_stack, 0, sizeof g_stack);
    regs = regs_at(g_j1, W(8), W(16));
    snapprof_frame_t frames[8];
    snapprof__unwind_outcome_t out;
    size_t n = unwind(&regs, whole_stack(), frames, 8, &out);
    ASSERT_EQ(out.completed, 1);
    ASSERT_EQ(n, 1);
}

/* A recursion of 100 JIT frames against a cap of 10. */
static void test_depth_cap(void)
{
    register_code();
    memset(g_stack, 0, sizeof g_stack);
    for (int i = 0; i < 100; i++) {
        size_t at = 16 + (size_t)i * 4;
        g_stack[at] = i == 99 ? 0 : W(at + 4);
        g_stack[at + 1] = g_j3 + 30;
    }
    snapprof_regs_t regs = regs_at(g_j3 + 40, W(8), W(16));
    snapprof_frame_t frames[10];
    snapprof__unwind_outcome_t out;
    size_t n = unwind(&regs, whole_stack(), frames, 10, &out);
    ASSERT_EQ(n, 10);
    ASSERT_EQ(out.truncated_depth, 1);
    expect_jit(&frames[8], g_j3 + 29, "j3");
    ASSERT_STR_EQ(frames[9].name, "[truncated]");
}

/* A copy unwound after the JIT replaced the code at the same address is
 * named after what ran when it was copied. */
static void test_unwound_late(void)
{
    register_code();
    snapprof_regs_t regs = build_interleaved();
    uint64_t copied = tu_mono_ns();
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
    ASSERT_OK(snapprof_jit_region_unregister(g_j2));
    ASSERT_OK(snapprof_jit_region_unregister(g_j3));
    snapprof_jit_layout_t fixed = tj_fixed_layout();
    ASSERT_OK(snapprof_jit_region_register(g_j2, 256, "j2-new", &fixed));
    nanosleep(&ts, NULL);

    snapprof_stack_copy_t stack = whole_stack();
    stack.timestamp_ns = copied;
    snapprof_frame_t frames[32];
    snapprof__unwind_outcome_t out;
    size_t n = unwind(&regs, stack, frames, 32, &out);
    ASSERT_EQ(out.completed, 1);
    ASSERT_EQ(n, 7);
    expect_jit(&frames[2], g_j2 + 10, "j2");
    expect_jit(&frames[4], g_j3 + 20, "j3"); /* gone since, still named */
    ASSERT_EQ(frames[4].module->is_loaded, 0);

    /* A copy made now sees the new code, and no code where j3 was. */
    stack.timestamp_ns = tu_mono_ns();
    n = unwind(&regs, stack, frames, 32, &out);
    expect_jit(&frames[2], g_j2 + 10, "j2-new");
    ASSERT_EQ(n, 6);
    ASSERT_EQ(out.unrecognized, 1);
    ASSERT_STR_EQ(frames[5].name, "[unknown]");
}

/* ------------------------------------------------------------------------ */
/* CPython's perf trampolines                                               */
/* ------------------------------------------------------------------------ */

/* The four shapes (see the layout's comment in jit.h): size, where the
 * whole frame starts, the call's return site, whether rbp is pushed, and
 * where instructions start. */
static const struct {
    uintptr_t size, body, call_return;
    int saves_fp;
    uintptr_t starts[6];
    size_t n_starts;
} k_shapes[] = {
    {11, 4, 6, 0, {0, 4, 6, 10}, 4},        /* sub; call; add; ret */
    {15, 8, 10, 0, {0, 4, 8, 10, 14}, 5},   /* endbr64; sub; call; add; ret */
    {8, 1, 6, 1, {0, 1, 4, 6, 7}, 5},       /* push; mov; call; pop; ret */
    {12, 5, 10, 1, {0, 4, 5, 8, 10, 11}, 6} /* endbr64; push; mov; call; pop; ret */
};

static uintptr_t g_tramp;

/* A trampoline of shape k at g_tramp, called by native code whose frame
 * record is at word 48 (it was called by native code too), and calling
 * native code (the interpreter) whose record is at word 16. The
 * trampoline's return address is word 19; its body's rsp is word 18, which
 * holds the caller's rbp when the shape pushes it, junk when it is
 * sub $8's padding. */
static void build_trampoline_stack(size_t k)
{
    static uint8_t *code;
    if (code == NULL)
        code = tj_map(4096);
    g_tramp = (uintptr_t)code + 64 * k;
    snapprof_jit_layout_t cpython;
    snapprof_jit_layout_init_cpython(&cpython);
    ASSERT_OK(snapprof_jit_region_register(g_tramp, k_shapes[k].size, "py::f:x.py", &cpython));
    memset(g_stack, 0, sizeof g_stack);
    g_stack[16] = k_shapes[k].saves_fp ? W(18) : W(48);
    g_stack[17] = g_tramp + k_shapes[k].call_return;
    g_stack[18] = k_shapes[k].saves_fp ? W(48) : 0x5a5a5a5a;
    g_stack[19] = NATIVE(2);
    g_stack[48] = 0;
    g_stack[49] = NATIVE(3);
}

static void expect_through_trampoline(const snapprof_frame_t *frames, size_t n,
                                      const snapprof__unwind_outcome_t *out, uintptr_t pc)
{
    ASSERT_EQ(out->completed, 1);
    ASSERT_EQ(n, 3);
    expect_jit(&frames[0], pc, "py::f:x.py");
    expect_native(&frames[1], NATIVE(2) - 1);
    expect_native(&frames[2], NATIVE(3) - 1);
}

/* The interpreter (native, frame pointers here) called by a trampoline
 * called by native code: the trampoline's frame is read at its return
 * site, and the walk goes on to the native caller. */
static void test_trampoline_caller(void)
{
    for (size_t k = 0; k < sizeof k_shapes / sizeof k_shapes[0]; k++) {
        build_trampoline_stack(k);
        snapprof_regs_t regs = regs_at(NATIVE(0), W(8), W(16));
        snapprof_frame_t frames[16];
        snapprof__unwind_outcome_t out;
        size_t n = unwind(&regs, whole_stack(), frames, 16, &out);
        ASSERT_EQ(out.completed, 1);
        ASSERT_EQ(n, 4);
        expect_native(&frames[0], NATIVE(0));
        expect_jit(&frames[1], g_tramp + k_shapes[k].call_return - 1, "py::f:x.py");
        expect_native(&frames[2], NATIVE(2) - 1);
        expect_native(&frames[3], NATIVE(3) - 1);

        /* A return address anywhere else in the trampoline is no call's:
         * the walk stops there, and says so. */
        g_stack[17] = g_tramp + k_shapes[k].call_return - 2;
        n = unwind(&regs, whole_stack(), frames, 16, &out);
        ASSERT_EQ(out.aborted, 1);
        ASSERT_STR_EQ(out.abort_reason, "JIT frame at a pc its layout does not allow");
        ASSERT_EQ(n, 3);
        ASSERT_STR_EQ(frames[2].name, "[unwind error]");
        ASSERT_EQ(frames[2].kind, SNAPPROF_FRAME_MARKER);
    }
}

/* A sample stopped in the trampoline itself, at each of its instructions:
 * at the entry (and push rbp or sub rsp) only the return address is on the
 * stack, in the body the whole frame, at the ret the return address again. */
static void test_trampoline_leaf(void)
{
    for (size_t k = 0; k < sizeof k_shapes / sizeof k_shapes[0]; k++) {
        build_trampoline_stack(k);
        for (size_t i = 0; i < k_shapes[k].n_starts; i++) {
            uintptr_t off = k_shapes[k].starts[i];
            int body = off >= k_shapes[k].body && off < k_shapes[k].size - 1;
            snapprof_regs_t regs = {{0}};
            regs.r[SNAPPROF_REG_PC] = g_tramp + off;
            regs.r[SNAPPROF_REG_SP] = body ? W(18) : W(19);
            /* After mov %rsp,%rbp, rbp is the trampoline's own. */
            regs.r[SNAPPROF_REG_FP] =
                k_shapes[k].saves_fp && body && off > k_shapes[k].body ? W(18) : W(48);
            snapprof_frame_t frames[16];
            snapprof__unwind_outcome_t out;
            size_t n = unwind(&regs, whole_stack(), frames, 16, &out);
            printf("size %zu, pc +%zu: %zu frames%s\n", (size_t)k_shapes[k].size, (size_t)off, n,
                   out.completed ? "" : " (not completed)");
            expect_through_trampoline(frames, n, &out, g_tramp + off);
        }
        /* Inside call *%rcx (2 bytes): no thread stops there. */
        snapprof_regs_t regs = regs_at(g_tramp + k_shapes[k].call_return - 1, W(18), W(48));
        expect_abort(regs, whole_stack(), "JIT frame at a pc its layout does not allow");
    }
}

/* The CPython layout is for one trampoline: a region of another size is
 * refused. */
static void test_trampoline_size(void)
{
    uint8_t *code = tj_map(4096);
    snapprof_jit_layout_t cpython;
    snapprof_jit_layout_init_cpython(&cpython);
    ASSERT_EQ(cpython.kind, SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE);
    ASSERT_EQ(snapprof_jit_region_register((uintptr_t)code, 16, "py::f", &cpython), -EINVAL);
    ASSERT_EQ(snapprof_jit_region_register((uintptr_t)code, 10, "py::f", &cpython), -EINVAL);
    for (size_t k = 0; k < sizeof k_shapes / sizeof k_shapes[0]; k++)
        ASSERT_OK(snapprof_jit_region_register((uintptr_t)code + 64 * k, k_shapes[k].size, "py::f",
                                               &cpython));
}

static void no_perf_map(void)
{
    ASSERT_OK(snapprof_jit_perf_map_configure("", NULL));
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"interleaved", test_interleaved},
        {"without_jit_unwinder", test_without_jit_unwinder},
        {"bad_frames", test_bad_frames},
        {"depth_cap", test_depth_cap},
        {"unwound_late", test_unwound_late},
        {"trampoline_caller", test_trampoline_caller},
        {"trampoline_leaf", test_trampoline_leaf},
        {"trampoline_size", test_trampoline_size},
    };
    return test_run_case_setup(cases, sizeof cases / sizeof cases[0], no_perf_map, argc, argv);
}
