/* CFI table unwinder: walks a stack copy with compiled CFI tables
 * (cfi_table.c), one binary search and two or three checked reads per
 * frame, the way the OpenTelemetry eBPF profiler and Parca's agent walk
 * stacks, instead of interpreting DWARF through libunwind every sample.
 *
 * A frame whose row the table cannot express (a signal trampoline, a PLT
 * stub's expression, a CFA in another register) or whose module has no
 * table (the vdso, an object the table budget left out) is stepped once by
 * the CFI engine (libunwind, as the libunwind unwinder does) when an
 * .eh_frame_hdr covers its pc, and the walk goes on with the tables. Code
 * that only .debug_frame describes and the table cannot express, JIT code
 * and code without CFI are handed on as UNRECOGNIZED_FRAME, to the
 * .debug_frame, JIT or frame-pointer unwinder.
 *
 * After a table step only pc, sp and rbp are known; the other callee-saved
 * registers keep the callee's values. A later frame whose CFI needs one of
 * them (x86-64 compilers emit such rules only for stack realignment, which
 * uses rbp) would be stepped wrongly; the hybrid unwinder has the same
 * limit after its frame-pointer steps. */
#include "unwinder/cfi_table.h"
#include "unwinder/cfi_table_unwinder.h"
#include "unwinder/cfi_engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Memory all the tables of the process may take (index and rows); modules
 * met after that are stepped by the CFI engine. libc's whole table is
 * about 1 MiB, so this is room for dozens of large libraries. */
#define TABLE_BYTES_MAX (64u << 20)

typedef struct mod_table {
    const snapprof_module_t *module; /* module cache entries never move */
    int eager;                       /* compiled whole (a test and bench seam) */
    snapprof__cfi_table_t *table;    /* NULL: no usable CFI, or over budget */
} mod_table_t;

/* The tables, one per module: process-wide, shared by every CFI table
 * unwinder (each profiler has its own unwinders), so that a library's
 * table is compiled once whatever the number of profilers, and the budget
 * holds for the process. Under its lock: a walk's lookups (which compile
 * FDEs), the sweep of unloaded modules, and the count of unwinders, the
 * last of which frees the tables. A walk keeps copies of the rows it
 * found, never a pointer into a table, so a table another unwinder frees
 * is never in use. */
static struct {
    pthread_mutex_t lock;
    mod_table_t *mods;
    size_t count, cap;
    size_t last;    /* index of the entry found last: walks stay in few modules */
    int unloaded;   /* a table of an unloaded module was opened since the last sweep */
    unsigned users; /* CFI table unwinders alive */
} g_store = {.lock = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t g_store_once = PTHREAD_ONCE_INIT;

/* A fork() may come while the sampling thread holds the lock: the child's
 * only thread would wait for it for ever. The tables are kept (they are
 * the parent's, as everything else the child's profilers inherit). */
static void store_fork_child(void)
{
    pthread_mutex_init(&g_store.lock, NULL);
}

static void store_init(void)
{
    pthread_atfork(NULL, NULL, store_fork_child);
}

/* Rows found per pc, kept: 1024 slots, direct-mapped. A profile meets the
 * same return addresses sample after sample, and a recursion the same one
 * frame after frame; a hit skips both binary searches. */
#define ROW_SLOTS 1024u

typedef struct row_slot {
    uintptr_t pc;
    const snapprof_module_t *module;
    snapprof__cfi_row_t row;
} row_slot_t;

typedef struct ct {
    snapprof__cfi_t *engine;    /* object table, checked reads, fallback steps */
    int eager;                  /* compile whole tables when a module is first met */
    row_slot_t rows[ROW_SLOTS]; /* copies of rows the tables can step */
} ct_t;

static size_t row_slot(uintptr_t pc)
{
    return (size_t)((pc * 0x9e3779b97f4a7c15ull) >> 54) % ROW_SLOTS;
}

/* The table of module m (compiled whole or not, as eager says), opened on
 * first use; NULL when it has none. Store lock held. */
static snapprof__cfi_table_t *table_of(const snapprof_module_t *m, int eager)
{
    if (g_store.last < g_store.count && g_store.mods[g_store.last].module == m &&
        g_store.mods[g_store.last].eager == eager)
        return g_store.mods[g_store.last].table;
    for (size_t i = 0; i < g_store.count; i++) {
        if (g_store.mods[i].module == m && g_store.mods[i].eager == eager) {
            g_store.last = i;
            return g_store.mods[i].table;
        }
    }
    if (g_store.count == g_store.cap) {
        size_t n = g_store.cap ? g_store.cap * 2 : 16;
        mod_table_t *p = realloc(g_store.mods, n * sizeof *p);
        if (!p)
            return NULL; /* try again next time */
        g_store.mods = p;
        g_store.cap = n;
    }
    /* The budget counts what the tables hold now, rows compiled since they
     * were opened included; a module met past it has no table. */
    size_t bytes = 0;
    for (size_t i = 0; i < g_store.count; i++) {
        if (g_store.mods[i].table) {
            snapprof__cfi_table_stats_t st;
            snapprof__cfi_table_stats(g_store.mods[i].table, &st);
            bytes += st.bytes;
        }
    }
    snapprof__cfi_table_t *t = NULL;
    if (bytes < TABLE_BYTES_MAX && snapprof__cfi_table_open(m, eager, &t) != 0)
        t = NULL;
    g_store.mods[g_store.count] = (mod_table_t){.module = m, .eager = eager, .table = t};
    g_store.last = g_store.count++;
    /* A copy taken before a dlclose() has frames in the unloaded module
     * (the module cache keeps its entry): its table comes from the file,
     * as any table does, and goes at the next sweep. */
    if (!__atomic_load_n(&m->is_loaded, __ATOMIC_RELAXED))
        g_store.unloaded = 1;
    return t;
}

/* Frees the tables of modules that are unloaded, if objects came or went
 * (changed) or a copy needed the table of an unloaded module. Their
 * entries stay in the module cache, and copies taken before the unload may
 * still point at them: such a copy opens the table again. */
static void store_sweep(int changed)
{
    pthread_mutex_lock(&g_store.lock);
    if (changed || g_store.unloaded) {
        g_store.unloaded = 0;
        size_t out = 0;
        for (size_t i = 0; i < g_store.count; i++) {
            mod_table_t *e = &g_store.mods[i];
            if (__atomic_load_n(&e->module->is_loaded, __ATOMIC_RELAXED))
                g_store.mods[out++] = *e;
            else
                snapprof__cfi_table_destroy(e->table);
        }
        g_store.count = out;
        g_store.last = 0;
    }
    pthread_mutex_unlock(&g_store.lock);
}

/* How this unwinder steps from frame f. */
enum { STEP_NONE = 0, STEP_TABLE, STEP_ENGINE };

static int plan(ct_t *c, const snapprof_frame_t *f, const snapprof__cfi_row_t **row_out)
{
    const snapprof_module_t *m = f->module;
    if (f->kind != SNAPPROF_FRAME_NATIVE || !m || m->kind != SNAPPROF_MODULE_NATIVE)
        return STEP_NONE;
    row_slot_t *slot = &c->rows[row_slot(f->pc)];
    if (slot->pc == f->pc && slot->module == m) {
        *row_out = &slot->row;
        return STEP_TABLE;
    }
    pthread_mutex_lock(&g_store.lock);
    snapprof__cfi_table_t *t = table_of(m, c->eager);
    const snapprof__cfi_row_t *row = t ? snapprof__cfi_table_find(t, f->pc) : NULL;
    int expressed = row && (row->kind & SNAPPROF__CFI_ROW_KIND_MASK) != SNAPPROF__CFI_ROW_FALLBACK;
    if (expressed)
        *slot = (row_slot_t){.pc = f->pc, .module = m, .row = *row};
    pthread_mutex_unlock(&g_store.lock);
    if (expressed) {
        *row_out = &slot->row;
        return STEP_TABLE;
    }
    /* Rows it cannot express, and modules without a table: libunwind's
     * step where an .eh_frame_hdr covers the pc; anything else (code only
     * .debug_frame describes, code without CFI) is another unwinder's. */
    return snapprof__cfi_covers(c->engine, f->pc) ? STEP_ENGINE : STEP_NONE;
}

static int ct_can_unwind_from(void *user_data, const snapprof_frame_t *frame)
{
    const snapprof__cfi_row_t *row;
    return plan(user_data, frame, &row) != STEP_NONE;
}

/* One step by a row: regs describes the callee; on success the caller.
 * Returns 1, 0 at the outermost frame, -1 with *reason. */
static int table_step(ct_t *c, const snapprof_stack_copy_t *s, snapprof_regs_t *regs,
                      const snapprof__cfi_row_t *row, uintptr_t *ip, snapprof__reason_t *reason)
{
    if ((row->kind & SNAPPROF__CFI_ROW_KIND_MASK) == SNAPPROF__CFI_ROW_OUTERMOST)
        return 0;
    uintptr_t sp = regs->r[SNAPPROF_REG_SP];
    uintptr_t cfa = regs->r[row->cfa_reg] + (uintptr_t)(intptr_t)row->cfa_offset;
    /* Every caller's frame lies above its callee's; this also ends any
     * cycle corrupt data could make. */
    if (cfa <= sp) {
        *reason = SNAPPROF__REASON_SP_ORDER;
        return -1;
    }
    /* Reads go through the engine's checked reader: the copy, or a
     * readable segment of a loaded object, never anything else. */
    uintptr_t ra, rbp = regs->r[SNAPPROF_REG_FP];
    if (snapprof__cfi_read_word(c->engine, s, cfa + (uintptr_t)(intptr_t)row->ra_offset, &ra) !=
            0 ||
        ((row->kind & SNAPPROF__CFI_ROW_RBP_SAVED) &&
         snapprof__cfi_read_word(c->engine, s, cfa + (uintptr_t)(intptr_t)row->rbp_offset, &rbp) !=
             0)) {
        *reason = SNAPPROF__REASON_MEMORY;
        return -1;
    }
    if (ra == 0)
        return 0;
    regs->r[SNAPPROF_REG_SP] = cfa;
    regs->r[SNAPPROF_REG_FP] = rbp;
    regs->r[SNAPPROF_REG_PC] = ra;
    *ip = ra;
    return 1;
}

static snapprof_unwind_result_t ct_try_unwind(void *user_data, snapprof_unwind_ctx_t *ctx)
{
    ct_t *c = user_data;
    /* Frame 0 has the exact interrupted pc; callers have return address - 1. */
    int last_adjusted = ctx->frame_count > 1;
    const snapprof__cfi_row_t *row = NULL;
    int how = plan(c, &ctx->frames[ctx->frame_count - 1], &row);
    for (;;) {
        snapprof_frame_t *f = &ctx->frames[ctx->frame_count - 1];
        uintptr_t next = 0;
        int sig = 0, rc;
        snapprof__reason_t why = SNAPPROF__REASON_NONE;
        if (how == STEP_TABLE) {
            rc = table_step(c, ctx->stack, &ctx->regs, row, &next, &why);
        } else if (how == STEP_ENGINE) {
            snapprof__cfi_step_t step = {0};
            rc = snapprof__cfi_step(c->engine, ctx->stack, &ctx->regs, f->pc, &step, &why);
            next = step.ip;
            sig = rc == 1 && step.signal;
        } else {
            /* Only when the objects changed since xCanUnwindFrom. */
            return snapprof__unwind_abort(ctx, SNAPPROF__REASON_NO_INFO);
        }
        if (rc == 0)
            return SNAPPROF_UNWIND_COMPLETED;
        if (rc < 0)
            return snapprof__unwind_abort(ctx, why);
        /* After a signal frame the pc is where the signal interrupted, and
         * the trampoline keeps its own exact address, as in the CFI walk. */
        if (sig && last_adjusted)
            f->pc += 1;
        uintptr_t caller = sig ? next : next - 1;
        if (snapprof__unwind_push_frame_near(ctx, caller, f->module) != 0)
            return SNAPPROF_UNWIND_ABORTED; /* depth cap; the chain notices */
        last_adjusted = !sig;
        how = plan(c, &ctx->frames[ctx->frame_count - 1], &row);
        if (how == STEP_NONE)
            return SNAPPROF_UNWIND_UNRECOGNIZED_FRAME; /* JIT, .debug_frame or no CFI */
    }
}

static void ct_update_modules(void *user_data)
{
    ct_t *c = user_data;
    int changed = snapprof__cfi_update_modules(c->engine);
    store_sweep(changed);
    /* Module entries are never freed, but be plain about it: nothing
     * learned before the objects changed is kept. */
    if (changed)
        memset(c->rows, 0, sizeof c->rows);
}

static void ct_destroy(void *user_data)
{
    ct_t *c = user_data;
    pthread_mutex_lock(&g_store.lock);
    if (--g_store.users == 0) {
        for (size_t i = 0; i < g_store.count; i++)
            snapprof__cfi_table_destroy(g_store.mods[i].table);
        free(g_store.mods);
        g_store.mods = NULL;
        g_store.count = g_store.cap = g_store.last = 0;
        g_store.unloaded = 0;
    }
    pthread_mutex_unlock(&g_store.lock);
    snapprof__cfi_destroy(c->engine);
    free(c);
}

static const snapprof_unwinder_ops_t ct_ops = {
    .version = SNAPPROF_UNWINDER_OPS_VERSION,
    .name = "cfi_table",
    .xCanUnwindFrom = ct_can_unwind_from,
    .xTryUnwind = ct_try_unwind,
    .xUpdateModules = ct_update_modules,
    .xDestroy = ct_destroy,
};

int snapprof__unwinder_is_cfi_table(const snapprof_unwinder_t *u)
{
    return u && u->ops == &ct_ops;
}

int snapprof__cfi_table_unwinder_create(int eager, snapprof_unwinder_t **out)
{
    if (!out)
        return -EINVAL;
    ct_t *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->eager = eager;
    pthread_once(&g_store_once, store_init);
    int rc = snapprof__cfi_create(&c->engine);
    if (rc == 0) {
        rc = snapprof_unwinder_create(&ct_ops, c, out);
        if (rc != 0) {
            snapprof__cfi_destroy(c->engine);
        } else {
            (*out)->cfi = c->engine;
            pthread_mutex_lock(&g_store.lock);
            g_store.users++;
            pthread_mutex_unlock(&g_store.lock);
        }
    }
    if (rc != 0)
        free(c);
    return rc;
}

int snapprof_cfi_table_unwinder_create(snapprof_unwinder_t **out)
{
    return snapprof__cfi_table_unwinder_create(0, out);
}

size_t snapprof__cfi_table_unwinder_tables(snapprof_unwinder_t *u,
                                           const snapprof_module_t **modules,
                                           snapprof__cfi_table_t **tables, size_t max)
{
    if (!u || u->ops != &ct_ops)
        return 0;
    ct_t *c = u->user_data;
    size_t n = 0;
    pthread_mutex_lock(&g_store.lock);
    for (size_t i = 0; i < g_store.count; i++) {
        if (!g_store.mods[i].table || g_store.mods[i].eager != c->eager)
            continue;
        if (n < max) {
            modules[n] = g_store.mods[i].module;
            tables[n] = g_store.mods[i].table;
        }
        n++;
    }
    pthread_mutex_unlock(&g_store.lock);
    return n;
}

void snapprof__cfi_table_store_totals(uint64_t *tables, uint64_t *bytes, uint64_t *build_ns)
{
    *tables = *bytes = *build_ns = 0;
    pthread_mutex_lock(&g_store.lock);
    for (size_t i = 0; i < g_store.count; i++) {
        if (!g_store.mods[i].table)
            continue;
        snapprof__cfi_table_stats_t st;
        snapprof__cfi_table_stats(g_store.mods[i].table, &st);
        (*tables)++;
        *bytes += st.bytes;
        *build_ns += st.build_ns;
    }
    pthread_mutex_unlock(&g_store.lock);
}
