/* .debug_frame unwinder: DWARF CFI from an object's .debug_frame section
 * (in the object itself or in its separate debug file), read and executed
 * by elfutils libdw, for code that ships no .eh_frame (built with
 * -fno-asynchronous-unwind-tables -fno-unwind-tables, as some embedded and
 * kernel-style code is).
 *
 * libdw turns the CFI row for a pc into DWARF expressions (dwarf_frame_cfa,
 * dwarf_frame_register); this file evaluates the few forms libdw produces
 * for ordinary CFI (register + offset, CFA + offset as a location or a
 * value, another register, and short expressions of constants, registers,
 * plus, minus and deref) and gives up on anything else. Every read goes
 * through the CFI engine's checked reader (snapprof__cfi_read_word): the
 * stack copy, or a readable segment of a loaded object. The engine also
 * tells which code its .eh_frame tables cover; that code is libunwind's,
 * and a walk that reaches it hands over. */
#include "module_cache/module_cache.h"
#include "unwinder/cfi_engine.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The .debug_frame of one loaded object, or the knowledge that it has none
 * (cfi == NULL). */
typedef struct df_object {
    uintptr_t load_bias;
    char *path;
    char *build_id;
    Elf *elf;       /* the file the CFI is read from (object or debug file) */
    Dwarf *dbg;     /* owns cfi */
    Dwarf_CFI *cfi; /* NULL: no usable .debug_frame */
} df_object_t;

typedef struct df {
    snapprof__cfi_t *engine; /* object table, checked reads, .eh_frame coverage */
    df_object_t *objects;
    size_t object_count, object_cap;
    /* The row xCanUnwindFrom looked up last, which xTryUnwind usually needs
     * next; freed with the objects, since it points into their CFI. */
    uintptr_t row_pc;
    Dwarf_Frame *row;
} df_t;

/* ------------------------------------------------------------------------ */
/* Objects                                                                  */
/* ------------------------------------------------------------------------ */

static void object_close(df_object_t *o)
{
    if (o->dbg)
        dwarf_end(o->dbg); /* frees the Dwarf_CFI too */
    if (o->elf)
        elf_end(o->elf);
    free(o->path);
    free(o->build_id);
    memset(o, 0, sizeof *o);
}

static void flush_objects(df_t *d)
{
    free(d->row);
    d->row = NULL;
    d->row_pc = 0;
    for (size_t i = 0; i < d->object_count; i++)
        object_close(&d->objects[i]);
    d->object_count = 0;
}

/* The entry for module, opened on first use (files are read here, on the
 * sampler thread, never in the signal handler). NULL only when out of
 * memory. */
static const df_object_t *object_of(df_t *d, const snapprof_module_t *m)
{
    const char *build_id = m->build_id ? m->build_id : "";
    for (size_t i = 0; i < d->object_count; i++) {
        const df_object_t *o = &d->objects[i];
        if (o->load_bias == m->load_bias && strcmp(o->path, m->path) == 0 &&
            strcmp(o->build_id, build_id) == 0)
            return o;
    }
    if (d->object_count == d->object_cap) {
        size_t n = d->object_cap ? d->object_cap * 2 : 16;
        df_object_t *p = realloc(d->objects, n * sizeof *p);
        if (!p)
            return NULL;
        d->objects = p;
        d->object_cap = n;
    }
    df_object_t o = {
        .load_bias = m->load_bias, .path = strdup(m->path), .build_id = strdup(build_id)};
    if (!o.path || !o.build_id) {
        object_close(&o);
        return NULL;
    }
    o.elf = snapprof__symbols_open_frame_elf(m->path, build_id);
    if (o.elf)
        o.dbg = dwarf_begin_elf(o.elf, DWARF_C_READ, NULL);
    if (o.dbg)
        o.cfi = dwarf_getcfi(o.dbg);
    if (!o.cfi) {
        /* Remember that there is nothing here, without keeping files. */
        if (o.dbg)
            dwarf_end(o.dbg);
        if (o.elf)
            elf_end(o.elf);
        o.dbg = NULL;
        o.elf = NULL;
    }
    d->objects[d->object_count] = o;
    return &d->objects[d->object_count++];
}

/* Whether frame is this unwinder's: native code that no .eh_frame table
 * covers, in a loaded object whose .debug_frame has a row for the pc. The
 * row is kept for xTryUnwind. */
static int owns(df_t *d, const snapprof_frame_t *frame)
{
    const snapprof_module_t *m = frame->module;
    if (frame->kind != SNAPPROF_FRAME_NATIVE || !m || m->kind != SNAPPROF_MODULE_NATIVE ||
        !m->path || m->path[0] != '/')
        return 0;
    if (snapprof__cfi_covers(d->engine, frame->pc) || !snapprof__cfi_in_code(d->engine, frame->pc))
        return 0;
    if (d->row && d->row_pc == frame->pc)
        return 1;
    const df_object_t *o = object_of(d, m);
    if (!o || !o->cfi)
        return 0;
    Dwarf_Frame *row = NULL;
    if (dwarf_cfi_addrframe(o->cfi, (Dwarf_Addr)(frame->pc - m->load_bias), &row) != 0)
        return 0;
    free(d->row);
    d->row = row;
    d->row_pc = frame->pc;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Evaluating the rules                                                     */
/* ------------------------------------------------------------------------ */

typedef struct df_eval {
    df_t *d;
    const snapprof_stack_copy_t *stack;
    const uintptr_t *regs; /* the callee's registers */
    uintptr_t cfa;
    int have_cfa;
    snapprof__reason_t reason; /* why the last evaluation failed */
} df_eval_t;

#define EVAL_STACK 8

/* Evaluates the ops libdw made of a CFA rule (for_cfa) or a register rule.
 * A register rule that starts from DW_OP_call_frame_cfa is a location
 * (read there) unless DW_OP_stack_value ends it, as in libdwfl's
 * frame_unwind.c; a CFA rule is always a value. Returns 0 or -1 with
 * ev->reason set. */
static int eval_ops(df_eval_t *ev, const Dwarf_Op *ops, size_t nops, int for_cfa, uintptr_t *out)
{
    uintptr_t st[EVAL_STACK];
    size_t n = 0;
    int is_location = 0;
    ev->reason = SNAPPROF__REASON_CFI_UNSUPPORTED;
    for (size_t i = 0; i < nops; i++) {
        const Dwarf_Op *op = &ops[i];
        uint8_t atom = op->atom;
        uintptr_t v = 0;
        if (atom >= DW_OP_lit0 && atom <= DW_OP_lit31) {
            v = (uintptr_t)(atom - DW_OP_lit0);
        } else if (atom >= DW_OP_breg0 && atom <= DW_OP_breg31) {
            unsigned reg = (unsigned)(atom - DW_OP_breg0);
            if (reg >= SNAPPROF_REG_COUNT)
                return -1;
            v = ev->regs[reg] + (uintptr_t)op->number; /* sleb, wraps */
        } else if (atom >= DW_OP_reg0 && atom <= DW_OP_reg31) {
            unsigned reg = (unsigned)(atom - DW_OP_reg0);
            if (reg >= SNAPPROF_REG_COUNT)
                return -1;
            v = ev->regs[reg];
        } else {
            switch (atom) {
            case DW_OP_const1u:
            case DW_OP_const1s:
            case DW_OP_const2u:
            case DW_OP_const2s:
            case DW_OP_const4u:
            case DW_OP_const4s:
            case DW_OP_const8u:
            case DW_OP_const8s:
            case DW_OP_constu:
            case DW_OP_consts:
                v = (uintptr_t)op->number;
                break;
            case DW_OP_bregx:
                if (op->number >= SNAPPROF_REG_COUNT)
                    return -1;
                v = ev->regs[op->number] + (uintptr_t)op->number2;
                break;
            case DW_OP_regx:
                if (op->number >= SNAPPROF_REG_COUNT)
                    return -1;
                v = ev->regs[op->number];
                break;
            case DW_OP_call_frame_cfa:
                if (for_cfa || !ev->have_cfa)
                    return -1;
                v = ev->cfa;
                is_location = 1;
                break;
            case DW_OP_plus_uconst:
                if (n < 1)
                    return -1;
                st[n - 1] += (uintptr_t)op->number;
                continue;
            case DW_OP_plus:
            case DW_OP_minus:
                if (n < 2)
                    return -1;
                n--;
                st[n - 1] = atom == DW_OP_plus ? st[n - 1] + st[n] : st[n - 1] - st[n];
                continue;
            case DW_OP_deref:
                if (n < 1)
                    return -1;
                if (snapprof__cfi_read_word(ev->d->engine, ev->stack, st[n - 1], &st[n - 1]) != 0) {
                    ev->reason = SNAPPROF__REASON_MEMORY;
                    return -1;
                }
                continue;
            case DW_OP_stack_value:
                is_location = 0;
                continue;
            case DW_OP_nop:
                continue;
            default:
                return -1; /* anything else: not ordinary CFI */
            }
        }
        if (n == EVAL_STACK)
            return -1;
        st[n++] = v;
    }
    if (n == 0)
        return -1;
    uintptr_t result = st[n - 1];
    if (is_location && snapprof__cfi_read_word(ev->d->engine, ev->stack, result, &result) != 0) {
        ev->reason = SNAPPROF__REASON_MEMORY;
        return -1;
    }
    *out = result;
    return 0;
}

enum { RULE_UNDEFINED = 0, RULE_SAME = 1, RULE_VALUE = 2 };

/* The caller's value of register reg by the row's rule: RULE_VALUE with
 * *out, RULE_SAME (the callee's value stands), RULE_UNDEFINED, or -1 with
 * ev->reason. libdw reports "undefined" as no ops in its own buffer and
 * "same value" as no ops and a NULL pointer (see dwarf_frame_register.c). */
static int register_rule(df_eval_t *ev, Dwarf_Frame *row, int reg, uintptr_t *out)
{
    Dwarf_Op mem[3], *ops = NULL;
    size_t nops = 0;
    if (dwarf_frame_register(row, reg, mem, &ops, &nops) != 0) {
        ev->reason = SNAPPROF__REASON_CFI_BAD_FRAME;
        return -1;
    }
    if (nops == 0)
        return ops == NULL ? RULE_SAME : RULE_UNDEFINED;
    return eval_ops(ev, ops, nops, 0, out) == 0 ? RULE_VALUE : -1;
}

/* One step from the frame regs describes, whose row is row. On success regs
 * describes the caller (pc, sp and the callee-saved registers the CFI
 * restores; others keep their values) and *signal says whether the row was
 * a signal frame's. Returns 1 after a step, 0 at the outermost frame, -1
 * on error with *reason set. */
static int step(df_t *d, const snapprof_stack_copy_t *stack, snapprof_regs_t *regs,
                Dwarf_Frame *row, int *signal, snapprof__reason_t *reason)
{
    bool sig = false;
    int ra = dwarf_frame_info(row, NULL, NULL, &sig);
    if (ra < 0 || ra >= SNAPPROF_REG_COUNT) {
        *reason = SNAPPROF__REASON_CFI_UNSUPPORTED;
        return -1;
    }
    df_eval_t ev = {.d = d, .stack = stack, .regs = regs->r};
    Dwarf_Op *ops = NULL;
    size_t nops = 0;
    if (dwarf_frame_cfa(row, &ops, &nops) != 0 || nops == 0) {
        *reason = SNAPPROF__REASON_NO_INFO;
        return -1;
    }
    if (eval_ops(&ev, ops, nops, 1, &ev.cfa) != 0) {
        *reason = ev.reason;
        return -1;
    }
    ev.have_cfa = 1;
    uintptr_t ip = 0;
    int rc = register_rule(&ev, row, ra, &ip);
    if (rc < 0) {
        *reason = ev.reason;
        return -1;
    }
    if (rc == RULE_UNDEFINED)
        return 0; /* the CFI marks the outermost frame */
    if (rc == RULE_SAME)
        ip = regs->r[ra];
    /* The registers a caller relies on, and sp. */
    static const int kept[] = {3, 6, 12, 13, 14, 15, SNAPPROF_REG_SP};
    uintptr_t next[SNAPPROF_REG_COUNT];
    memcpy(next, regs->r, sizeof next);
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        uintptr_t v = 0;
        rc = register_rule(&ev, row, kept[i], &v);
        if (rc < 0) {
            *reason = ev.reason;
            return -1;
        }
        if (rc == RULE_VALUE)
            next[kept[i]] = v;
        else if (kept[i] == SNAPPROF_REG_SP)
            next[kept[i]] = ev.cfa; /* the ABI's rule: the caller's sp is the CFA */
        /* Other registers without a rule keep the callee's value. */
    }
    if (ip == 0)
        return 0;
    /* Every caller's frame lies above its callee's; this also ends any
     * cycle corrupt data could make. */
    if (next[SNAPPROF_REG_SP] <= regs->r[SNAPPROF_REG_SP]) {
        *reason = SNAPPROF__REASON_SP_ORDER;
        return -1;
    }
    next[SNAPPROF_REG_PC] = ip;
    memcpy(regs->r, next, sizeof next);
    *signal = sig;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* The unwinder                                                             */
/* ------------------------------------------------------------------------ */

static int df_can_unwind_from(void *user_data, const snapprof_frame_t *frame)
{
    return owns(user_data, frame);
}

static snapprof_unwind_result_t df_try_unwind(void *user_data, snapprof_unwind_ctx_t *ctx)
{
    df_t *d = user_data;
    /* Frame 0 has the exact interrupted pc; callers have return address - 1. */
    int last_adjusted = ctx->frame_count > 1;
    for (;;) {
        snapprof_frame_t *f = &ctx->frames[ctx->frame_count - 1];
        if (!owns(d, f)) {
            /* Only when the objects changed since xCanUnwindFrom. */
            return snapprof__unwind_abort(ctx, SNAPPROF__REASON_NO_INFO);
        }
        Dwarf_Frame *row = d->row;
        d->row = NULL;
        int sig = 0;
        snapprof__reason_t why = SNAPPROF__REASON_NONE;
        int rc = step(d, ctx->stack, &ctx->regs, row, &sig, &why);
        free(row);
        if (rc == 0)
            return SNAPPROF_UNWIND_COMPLETED;
        if (rc < 0)
            return snapprof__unwind_abort(ctx, why);
        uintptr_t ip = ctx->regs.r[SNAPPROF_REG_PC];
        /* After a signal frame the pc is where the signal interrupted, and
         * the trampoline keeps its own exact address, as in the CFI walk. */
        if (sig && last_adjusted)
            f->pc += 1;
        uintptr_t pc = sig ? ip : ip - 1;
        if (snapprof_unwind_push_frame(ctx, pc, SNAPPROF_FRAME_NATIVE, NULL) != 0)
            return SNAPPROF_UNWIND_ABORTED; /* depth cap; the chain notices */
        last_adjusted = !sig;
        if (!owns(d, &ctx->frames[ctx->frame_count - 1]))
            return SNAPPROF_UNWIND_UNRECOGNIZED_FRAME; /* libunwind's, JIT, or unknown */
    }
}

static void df_update_modules(void *user_data)
{
    df_t *d = user_data;
    /* Objects came or went: drop every handle, since an address range may
     * now hold another object; they are reopened when a frame needs them.
     * Nothing is being unwound now (same thread, between samples). */
    if (snapprof__cfi_update_modules(d->engine))
        flush_objects(d);
}

static void df_destroy(void *user_data)
{
    df_t *d = user_data;
    flush_objects(d);
    free(d->objects);
    snapprof__cfi_destroy(d->engine);
    free(d);
}

static const snapprof_unwinder_ops_t df_ops = {
    .version = SNAPPROF_UNWINDER_OPS_VERSION,
    .name = "debug_frame",
    .xCanUnwindFrom = df_can_unwind_from,
    .xTryUnwind = df_try_unwind,
    .xUpdateModules = df_update_modules,
    .xDestroy = df_destroy,
};

int snapprof_debug_frame_unwinder_create(snapprof_unwinder_t **out)
{
    if (!out)
        return -EINVAL;
    df_t *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    int rc = snapprof__cfi_create(&d->engine);
    if (rc == 0) {
        rc = snapprof_unwinder_create(&df_ops, d, out);
        if (rc != 0)
            snapprof__cfi_destroy(d->engine);
        else
            (*out)->cfi = d->engine;
    }
    if (rc != 0)
        free(d);
    return rc;
}
