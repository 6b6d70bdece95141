/* Tests of the frame-pointer unwinder on stack copies built by hand: a good
 * chain, and every kind of bad frame pointer it must refuse to follow; and
 * of the generic wrapper a third-party unwinder goes through. */
#include "test.h"
#include "test_util.h"
#include "unwinder/unwinder_internal.h"

#include <errno.h>
#include <stdlib.h>

/* Return addresses must lie in a native module, so use this code's own. */
__attribute__((noinline)) void fp_test_code(void)
{
    __asm__ volatile("nop; nop; nop; nop; nop; nop; nop; nop");
}
#define CODE(i) ((uintptr_t)&fp_test_code + 1 + (uintptr_t)(i))

#define WORDS 1024
static uintptr_t g_stack[WORDS] __attribute__((aligned(16)));

static snapprof_stack_copy_t whole_stack(void)
{
    snapprof_stack_copy_t s = {.bottom = (uintptr_t)g_stack,
                               .top = (uintptr_t)(g_stack + WORDS),
                               .orig_bottom = (uintptr_t)g_stack};
    return s;
}

/* Writes a frame record [next fp][return address] at word index i. */
static uintptr_t record(size_t i, uintptr_t next_fp, uintptr_t ret)
{
    g_stack[i] = next_fp;
    g_stack[i + 1] = ret;
    return (uintptr_t)&g_stack[i];
}

static size_t unwind(uintptr_t fp, size_t max_frames, snapprof_frame_t *frames,
                     snapprof__unwind_outcome_t *out, snapprof_stack_copy_t stack)
{
    snapprof_unwinder_t *fpu;
    ASSERT_OK(snapprof_frame_pointer_unwinder_create(&fpu));
    snapprof_regs_t regs = {{0}};
    regs.r[SNAPPROF_REG_PC] = CODE(0);
    regs.r[SNAPPROF_REG_SP] = (uintptr_t)g_stack;
    regs.r[SNAPPROF_REG_FP] = fp;
    size_t n = snapprof__unwind_chain(&fpu, 1, &regs, &stack, frames, max_frames, out);
    snapprof_unwinder_destroy(fpu);
    return n;
}

static void expect_abort(uintptr_t fp, snapprof_stack_copy_t stack)
{
    snapprof_frame_t frames[16];
    snapprof__unwind_outcome_t out;
    size_t n = unwind(fp, 16, frames, &out, stack);
    ASSERT_EQ(out.aborted, 1);
    ASSERT_EQ(out.completed, 0);
    ASSERT_GE(n, 2);
    ASSERT_EQ(frames[n - 1].kind, SNAPPROF_FRAME_MARKER);
    ASSERT_STR_EQ(frames[n - 1].name, "[unwind error]");
}

static void test_good_chain(void)
{
    uintptr_t f3 = record(64, 0, CODE(3));
    uintptr_t f2 = record(32, f3, CODE(2));
    uintptr_t f1 = record(16, f2, CODE(1));
    snapprof_frame_t frames[16];
    snapprof__unwind_outcome_t out;
    size_t n = unwind(f1, 16, frames, &out, whole_stack());
    ASSERT_EQ(out.completed, 1);
    ASSERT_EQ(n, 4);
    ASSERT_UEQ(frames[0].pc, CODE(0));
    for (int i = 1; i <= 3; i++) {
        ASSERT_UEQ(frames[i].pc, CODE(i) - 1); /* return address - 1 */
        ASSERT_EQ(frames[i].kind, SNAPPROF_FRAME_NATIVE);
        ASSERT_NOT_NULL(frames[i].module);
        ASSERT_STR_EQ(tu_frame_name(&frames[i]), "fp_test_code");
    }
}

static void test_outside_stack(void)
{
    expect_abort((uintptr_t)(g_stack + WORDS) + 64, whole_stack());
    expect_abort((uintptr_t)g_stack - 64, whole_stack());
    /* A record that would straddle the top of the copy. */
    expect_abort((uintptr_t)(g_stack + WORDS - 1), whole_stack());
}

static void test_points_to_itself(void)
{
    uintptr_t f = (uintptr_t)&g_stack[16];
    record(16, f, CODE(1));
    expect_abort(f, whole_stack());
}

static void test_cycle(void)
{
    uintptr_t a = (uintptr_t)&g_stack[16], b = (uintptr_t)&g_stack[32];
    record(16, b, CODE(1));
    record(32, a, CODE(2));
    expect_abort(a, whole_stack());
}

static void test_overflow(void)
{
    /* fp + 16 would wrap around the address space. */
    expect_abort(UINTPTR_MAX - 15, whole_stack());
    expect_abort(UINTPTR_MAX & ~(uintptr_t)15, whole_stack());
}

static void test_misaligned(void)
{
    uintptr_t f2 = record(64, 0, CODE(2));
    record(16, f2, CODE(1));
    expect_abort((uintptr_t)&g_stack[16] + 8, whole_stack());
}

static void test_below_sp(void)
{
    /* sp at word 512: a frame pointer below it is not a caller's frame. */
    snapprof_unwinder_t *fpu;
    ASSERT_OK(snapprof_frame_pointer_unwinder_create(&fpu));
    record(16, 0, CODE(1));
    snapprof_regs_t regs = {{0}};
    regs.r[SNAPPROF_REG_PC] = CODE(0);
    regs.r[SNAPPROF_REG_SP] = (uintptr_t)&g_stack[512];
    regs.r[SNAPPROF_REG_FP] = (uintptr_t)&g_stack[16];
    snapprof_stack_copy_t stack = whole_stack();
    snapprof_frame_t frames[8];
    snapprof__unwind_outcome_t out;
    snapprof__unwind_chain(&fpu, 1, &regs, &stack, frames, 8, &out);
    ASSERT_EQ(out.aborted, 1);
    snapprof_unwinder_destroy(fpu);
}

/* A next frame pointer at or below the current one: the walk stops at
 * that record with FP_ORDER, keeping the frames before it, and counts a bad
 * frame. An unwinder that followed such a chain one step further also
 * aborted (the next fp lies below the new sp), which expect_abort() alone
 * cannot tell apart; the frame count, the reason and the last real frame
 * can. Each chain: frame 0 (the pc), the record at fp (CODE(1)), then the
 * record whose next fp goes down or stays (CODE(2)), which the walk drops. */
static void test_next_fp_below(void)
{
    static const struct {
        const char *what;
        size_t second, next_of_second; /* word indices; next_of_second <= second */
    } chains[] = {
        {"below, above sp", 64, 32}, /* 32 is above the sp at word 0 */
        {"below the first record", 64, 8},
        {"equal: points to itself", 64, 64},
        {"one record below", 64, 62},
    };
    for (size_t c = 0; c < sizeof chains / sizeof chains[0]; c++) {
        memset(g_stack, 0, sizeof g_stack);
        uintptr_t next = (uintptr_t)&g_stack[chains[c].next_of_second];
        /* A plausible record where the bad next fp points, so that a walk
         * that followed it would find a frame there. */
        if (chains[c].next_of_second != chains[c].second)
            record(chains[c].next_of_second, 0, CODE(3));
        uintptr_t f2 = record(chains[c].second, next, CODE(2));
        uintptr_t f1 = record(16, f2, CODE(1));
        snapprof_frame_t frames[16];
        snapprof__unwind_outcome_t out;
        size_t n = unwind(f1, 16, frames, &out, whole_stack());
        printf("%s: %zu frames, reason %s\n", chains[c].what, n,
               out.abort_reason ? out.abort_reason : "(none)");
        ASSERT_EQ(out.aborted, 1);
        ASSERT_EQ(out.completed, 0);
        ASSERT_STR_EQ(out.abort_reason, "frame pointers do not increase");
        ASSERT_EQ(out.abort_kind, SNAPPROF__ABORT_BAD_FRAME);
        /* The pc, CODE(1)'s frame, the marker: CODE(2)'s record, whose
         * next fp goes wrong, is not trusted. */
        ASSERT_EQ(n, 3);
        ASSERT_UEQ(frames[0].pc, CODE(0));
        ASSERT_UEQ(frames[1].pc, CODE(1) - 1);
        ASSERT_EQ(frames[2].kind, SNAPPROF_FRAME_MARKER);
        ASSERT_STR_EQ(frames[2].name, "[unwind error]");
    }
}

static void test_depth_cap(void)
{
    /* 100 records, a cap of 10 frames: 9 real frames and the marker. */
    uintptr_t next = 0;
    for (int i = 99; i >= 0; i--)
        next = record(16 + (size_t)i * 4, next, CODE(1));
    snapprof_frame_t frames[10];
    snapprof__unwind_outcome_t out;
    size_t n = unwind(next, 10, frames, &out, whole_stack());
    ASSERT_EQ(n, 10);
    ASSERT_EQ(out.truncated_depth, 1);
    ASSERT_STR_EQ(frames[9].name, "[truncated]");
}

static void test_unknown_pc(void)
{
    /* A pc in no module: nobody claims it, and the sample says so. */
    snapprof_unwinder_t *fpu;
    ASSERT_OK(snapprof_frame_pointer_unwinder_create(&fpu));
    snapprof_regs_t regs = {{0}};
    regs.r[SNAPPROF_REG_PC] = 0x10;
    snapprof_stack_copy_t stack = whole_stack();
    snapprof_frame_t frames[8];
    snapprof__unwind_outcome_t out;
    size_t n = snapprof__unwind_chain(&fpu, 1, &regs, &stack, frames, 8, &out);
    ASSERT_EQ(n, 2);
    ASSERT_EQ(out.unrecognized, 1);
    ASSERT_STR_EQ(frames[1].name, "[unknown]");
    snapprof_unwinder_destroy(fpu);
}

static int never_claims(void *user_data, const snapprof_frame_t *frame)
{
    (void)user_data;
    (void)frame;
    return 0;
}

static snapprof_unwind_result_t gives_up(void *user_data, snapprof_unwind_ctx_t *ctx)
{
    (void)user_data;
    (void)ctx;
    return SNAPPROF_UNWIND_ABORTED;
}

static int destroyed;

static void count_destroy(void *user_data)
{
    (void)user_data;
    destroyed++;
}

/* The generic wrapper: a version below 1 is no ops struct this library
 * can read (SNAPPROF_EVERSION), a newer one is read by its version-1
 * members (append-only), the required members must be there, and a failed
 * create never calls xDestroy. */
static void test_create_checks_ops(void)
{
    snapprof_unwinder_ops_t ops = {
        .version = SNAPPROF_UNWINDER_OPS_VERSION,
        .name = "test",
        .xCanUnwindFrom = never_claims,
        .xTryUnwind = gives_up,
        .xDestroy = count_destroy,
    };
    snapprof_unwinder_t *u = NULL;
    ASSERT_EQ(snapprof_unwinder_create(NULL, NULL, &u), -EINVAL);
    ASSERT_EQ(snapprof_unwinder_create(&ops, NULL, NULL), -EINVAL);
    snapprof_unwinder_ops_t bad = ops;
    bad.version = 0;
    ASSERT_EQ(snapprof_unwinder_create(&bad, NULL, &u), SNAPPROF_EVERSION);
    bad.version = -1;
    ASSERT_EQ(snapprof_unwinder_create(&bad, NULL, &u), SNAPPROF_EVERSION);
    bad = ops;
    bad.xTryUnwind = NULL;
    ASSERT_EQ(snapprof_unwinder_create(&bad, NULL, &u), -EINVAL);
    bad = ops;
    bad.xCanUnwindFrom = NULL;
    ASSERT_EQ(snapprof_unwinder_create(&bad, NULL, &u), -EINVAL);
    ASSERT_NULL(u);
    ASSERT_EQ(destroyed, 0);
    snapprof_unwinder_ops_t newer = ops;
    newer.version = SNAPPROF_UNWINDER_OPS_VERSION + 1;
    ASSERT_OK(snapprof_unwinder_create(&newer, NULL, &u));
    snapprof_unwinder_destroy(u);
    ASSERT_EQ(destroyed, 1);
    ASSERT_CONTAINS(snapprof_strerror(SNAPPROF_EVERSION), "version");
}

/* A third-party unwinder that claims every frame and aborts with the code
 * user_data points at, and a text of its own. */
static int claims_all(void *user_data, const snapprof_frame_t *frame)
{
    (void)user_data;
    return frame->kind != SNAPPROF_FRAME_MARKER;
}

static snapprof_unwind_result_t aborts_with_code(void *user_data, snapprof_unwind_ctx_t *ctx)
{
    ctx->abort_error = *(const snapprof_unwind_error_t *)user_data;
    ctx->abort_reason = "custom: gave up";
    return SNAPPROF_UNWIND_ABORTED;
}

static const snapprof_unwinder_ops_t aborting_ops = {
    .version = SNAPPROF_UNWINDER_OPS_VERSION,
    .name = "aborting",
    .xCanUnwindFrom = claims_all,
    .xTryUnwind = aborts_with_code,
};

/* A custom unwinder's abort code decides the stats counter its samples
 * land in (its text goes along for logs): each code in the chain's
 * outcome, then through a profiler into snapprof_stats_t. An unknown code
 * counts as other. */
static void test_custom_abort_counted(void)
{
    static const struct {
        snapprof_unwind_error_t code;
        snapprof__abort_kind_t kind;
    } cases[] = {
        {SNAPPROF_UNWIND_EBADFRAME, SNAPPROF__ABORT_BAD_FRAME},
        {SNAPPROF_UNWIND_ENOINFO, SNAPPROF__ABORT_NO_INFO},
        {SNAPPROF_UNWIND_EMEMORY, SNAPPROF__ABORT_MEMORY},
        {SNAPPROF_UNWIND_EUNSPEC, SNAPPROF__ABORT_OTHER},
        {(snapprof_unwind_error_t)99, SNAPPROF__ABORT_OTHER},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snapprof_unwinder_t *u;
        ASSERT_OK(snapprof_unwinder_create(&aborting_ops, (void *)&cases[i].code, &u));
        snapprof_stack_copy_t stack = whole_stack();
        snapprof_regs_t regs = {{0}};
        regs.r[SNAPPROF_REG_PC] = CODE(0);
        regs.r[SNAPPROF_REG_SP] = (uintptr_t)g_stack;
        snapprof_frame_t frames[4];
        snapprof__unwind_outcome_t out;
        snapprof__unwind_chain(&u, 1, &regs, &stack, frames, 4, &out);
        ASSERT_EQ(out.aborted, 1);
        ASSERT_EQ(out.abort_kind, cases[i].kind);
        ASSERT_STR_EQ(out.abort_reason, "custom: gave up");
        snapprof_unwinder_destroy(u);
    }

    snapprof_thread_t *me;
    ASSERT_OK(snapprof_thread_register(&me));
    for (size_t i = 0; i < 4; i++) {
        snapprof_params_t params = tu_params(1000000); /* 1 ms */
        snapprof_profiler_t *p;
        ASSERT_OK(snapprof_profiler_create(&params, &me, 1, &p));
        snapprof_unwinder_t *u;
        ASSERT_OK(snapprof_unwinder_create(&aborting_ops, (void *)&cases[i].code, &u));
        ASSERT_OK(snapprof_profiler_add_unwinder(p, u));
        ASSERT_OK(snapprof_profiler_start(p));
        snapprof_stats_t st;
        uint64_t deadline = tu_mono_ns() + 120ull * 1000000000u; /* only against hangs */
        do {
            tu_burn_cpu_ns(10000000);
            ASSERT_OK(snapprof_profiler_get_stats(p, &st));
        } while (st.unwind_aborted < 5 && tu_mono_ns() < deadline);
        ASSERT_OK(snapprof_profiler_stop(p));
        ASSERT_OK(snapprof_profiler_get_stats(p, &st));
        snapprof_profiler_destroy(p);
        ASSERT_GE(st.unwind_aborted, 5);
        /* Every aborted sample in the code's counter, save any whose copy
         * was truncated (counted as such whatever the code). */
        uint64_t want = st.unwind_aborted - st.unwind_aborted_truncated_copy;
        const uint64_t got[] = {st.unwind_aborted_bad_frame, st.unwind_aborted_no_info,
                                st.unwind_aborted_memory, st.unwind_aborted_other};
        for (size_t k = 0; k < 4; k++)
            ASSERT_EQ(got[k], k == i ? want : 0);
        ASSERT_GE(want, 1);
    }
    snapprof_thread_release(me);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"good_chain", test_good_chain},
        {"outside_stack", test_outside_stack},
        {"points_to_itself", test_points_to_itself},
        {"cycle", test_cycle},
        {"overflow", test_overflow},
        {"misaligned", test_misaligned},
        {"below_sp", test_below_sp},
        {"next_fp_below", test_next_fp_below},
        {"depth_cap", test_depth_cap},
        {"unknown_pc", test_unknown_pc},
        {"create_checks_ops", test_create_checks_ops},
        {"custom_abort_counted", test_custom_abort_counted},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
