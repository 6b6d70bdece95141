/* libFuzzer harness: the profile builders on arbitrary samples.
 *
 * Each input is a profile: a mode, samples with any frames (native frames
 * in the real loaded modules, in modules that are gone or have no file,
 * in a JIT region; JIT and marker frames with or without names; no module
 * at all), any thread ids and names, any labels (string and numeric, with
 * or without units, empty keys the builder must refuse), and final
 * counters. The samples go to a pprof, a folded and a trace builder; the
 * pprof file is then decoded again (zlib, protobuf-c) and checked the way
 * go tool pprof reads it: ids nonzero and unique, every reference resolves,
 * string table indices in range, string table[0] "", the mappings' has_*
 * flags true to their locations, the counters round-trip through the
 * hidden stats entry, and the sample counts add up to the samples given. */
#include "fuzz_util.h"

#include "module_cache/module_cache.h"
#include "test_profile_builder_util.h"

#include <snapprof/jit.h>
#include <snapprof/profile_builder.h>
#include <snapprof/snapprof.h>

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_MODULES 256
static const snapprof_module_t *g_modules[MAX_MODULES];
static size_t g_nmodules;
static char g_dir[256], g_pprof[300], g_folded[300], g_trace[300];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_scratch_dir("fuzz_pprof", g_dir, sizeof g_dir);
    snprintf(g_pprof, sizeof g_pprof, "%s/p.pb.gz", g_dir);
    snprintf(g_folded, sizeof g_folded, "%s/p.folded", g_dir);
    snprintf(g_trace, sizeof g_trace, "%s/p.json", g_dir);

    /* A JIT region, so that frames can be in one. */
    void *jit = mmap(NULL, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FUZZ_CHECK(jit != MAP_FAILED);
    FUZZ_CHECK(snapprof_jit_region_register((uintptr_t)jit, 8192, "fuzz_jit", NULL) == 0);
    FUZZ_CHECK(snapprof__module_cache_refresh() == 0);
    g_nmodules = snapprof__module_cache_list(g_modules, MAX_MODULES - 1);
    if (g_nmodules > MAX_MODULES - 1)
        g_nmodules = MAX_MODULES - 1;
    const snapprof_module_t *m = snapprof_module_find((uintptr_t)jit + 100);
    FUZZ_CHECK(m != NULL && m->kind == SNAPPROF_MODULE_JIT);
    g_modules[g_nmodules++] = m;
    return 0;
}

/* Modules that no cache entry backs: unloaded, fileless, without build-id. */
static const snapprof_module_t g_fake[] = {
    {.start = 0x10000,
     .limit = 0x20000,
     .path = "/nonexistent/libgone.so",
     .build_id = "",
     .kind = SNAPPROF_MODULE_NATIVE},
    {.start = 0x30000,
     .limit = 0x40000,
     .path = "/nonexistent/libid.so",
     .build_id = "0123456789abcdef",
     .kind = SNAPPROF_MODULE_NATIVE,
     .is_loaded = 1},
    {.start = 0x50000,
     .limit = 0x60000,
     .path = "",
     .build_id = "",
     .kind = SNAPPROF_MODULE_ANON,
     .is_loaded = 1},
    {.start = 0x70000,
     .limit = 0x80000,
     .path = "[vdso]",
     .build_id = "",
     .kind = SNAPPROF_MODULE_NATIVE,
     .is_loaded = 1},
};

typedef struct strs {
    char *v[4096];
    size_t n;
} strs_t;

static const char *keep(strs_t *s, char *str)
{
    if (s->n == sizeof s->v / sizeof s->v[0]) {
        free(str);
        return "";
    }
    return s->v[s->n++] = str;
}

static void read_frame(fuzz_in_t *in, snapprof_frame_t *f, strs_t *strs)
{
    uint8_t k = fuzz_u8(in);
    uint8_t msel = fuzz_u8(in);
    uint32_t off = (uint32_t)fuzz_u64(in);
    memset(f, 0, sizeof *f);
    f->kind = (snapprof_frame_kind_t)(k % 3);
    if (msel < 128 && g_nmodules > 0) {
        f->module = g_modules[msel % g_nmodules];
        /* 64 pcs spread over the first 16 KiB of each: enough code to
         * name, few enough pcs that their symbols are soon cached (each
         * new pc in libc is a DWARF lookup in a large debug file). */
        uintptr_t span = f->module->limit - f->module->start;
        uintptr_t at = (uintptr_t)(off % 64) * 251;
        f->pc = f->module->start + (span > at ? at : 0);
    } else if (msel < 192) {
        f->module = &g_fake[msel % (sizeof g_fake / sizeof g_fake[0])];
        f->pc = f->module->start + off % 0x10000;
    } else {
        f->pc = (uintptr_t)off << (msel & 31);
    }
    if (f->kind != SNAPPROF_FRAME_NATIVE && (k & 4))
        f->name = keep(strs, fuzz_str(in));
    else if (f->kind == SNAPPROF_FRAME_MARKER)
        f->name = "[truncated]";
}

/* Input: [mode][counters: 8 bytes each, as many as the input gives] then
 * samples: [frames n][n frames: kind, module, pc (8)][tid (8)][cpu (8)]
 * [wall (8)][flags][thread name\0][labels n][n labels: key\0, kind,
 * str\0 | num (8) [unit\0]]. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    uint8_t mode = fuzz_u8(&in);
    snapprof_stats_t stats;
    memset(&stats, 0, sizeof stats);
    uint8_t n_counters = fuzz_u8(&in);
    for (size_t i = 0; i < n_counters && i < sizeof stats / 8; i++) {
        uint64_t v = fuzz_u64(&in);
        memcpy((char *)&stats + 8 * i, &v, 8);
    }
    stats.trigger_fallback_from =
        (snapprof_trigger_t)(stats.trigger_fallback_from % SNAPPROF_TRIGGER_COUNT);

    snapprof_builder_t *b[3];
    FUZZ_CHECK(snapprof_pprof_builder_create(g_pprof, &b[0]) == 0);
    FUZZ_CHECK(snapprof_folded_builder_create(g_folded, &b[1]) == 0);
    FUZZ_CHECK(snapprof_trace_builder_create(g_trace, &b[2]) == 0);
    snapprof_profile_info_t info = {.start_time_ns = 1700000000000000000ull,
                                    .start_mono_ns = 1000,
                                    .period_ns = 10000000ull,
                                    .mode = mode & 1 ? SNAPPROF_MODE_WALL : SNAPPROF_MODE_CPU};
    for (int i = 0; i < 3; i++)
        if (b[i]->ops->xOnProfileStarted)
            FUZZ_CHECK(b[i]->ops->xOnProfileStarted(b[i]->user_data, &info) == 0);

    static strs_t strs;
    strs.n = 0;
    uint64_t accepted = 0;
    snapprof_frame_t frames[64];
    snapprof_label_t labels[8];
    while (in.n > 0) {
        snapprof_sample_t s;
        memset(&s, 0, sizeof s);
        s.frame_count = fuzz_u8(&in) % 64;
        for (size_t i = 0; i < s.frame_count; i++)
            read_frame(&in, &frames[i], &strs);
        s.frames = frames;
        s.tid = (pid_t)fuzz_u64(&in);
        s.cpu_ns = fuzz_u64(&in) >> 4;
        s.wall_ns = fuzz_u64(&in) >> 4;
        s.timestamp_ns = 1000 + (fuzz_u64(&in) >> 8);
        s.flags = fuzz_u8(&in) & 0x1f;
        s.thread_name = keep(&strs, fuzz_str(&in));
        s.label_count = fuzz_u8(&in) % 8;
        int bad_label = 0;
        for (size_t i = 0; i < s.label_count; i++) {
            memset(&labels[i], 0, sizeof labels[i]);
            labels[i].key = keep(&strs, fuzz_str(&in));
            bad_label |= labels[i].key[0] == '\0';
            uint8_t lk = fuzz_u8(&in);
            if (lk & 1) {
                labels[i].str = keep(&strs, fuzz_str(&in));
            } else {
                labels[i].num = (int64_t)fuzz_u64(&in);
                if (lk & 2)
                    labels[i].num_unit = keep(&strs, fuzz_str(&in));
            }
        }
        s.labels = labels;
        for (int i = 0; i < 3; i++) {
            int rc = b[i]->ops->xOnSample(b[i]->user_data, &s);
            if (bad_label && i == 0)
                FUZZ_CHECK(rc == -EINVAL);
            else if (i == 0)
                FUZZ_CHECK(rc == 0);
            else
                FUZZ_CHECK(rc == 0 || rc == -EINVAL);
        }
        accepted += !bad_label;
    }
    info.duration_ns = 2000000000ull;
    info.stats = &stats;
    for (int i = 0; i < 3; i++)
        FUZZ_CHECK(b[i]->ops->xOnProfileCompleted(b[i]->user_data, &info) == 0);
    for (int i = 0; i < 3; i++)
        snapprof_builder_destroy(b[i]);

    Snapprof__Pprof__Profile *p = pbt_load(g_pprof);
    pbt_check_valid(p);
    pbt_expect_stats(p, &stats);
    uint64_t counted = 0;
    for (size_t i = 0; i < p->n_sample; i++) {
        FUZZ_CHECK(p->sample[i]->value[0] >= 1);
        counted += (uint64_t)p->sample[i]->value[0];
    }
    FUZZ_CHECK(counted == accepted);
    snapprof__pprof__profile__free_unpacked(p, NULL);
    unlink(g_pprof);
    unlink(g_folded);
    unlink(g_trace);
    for (size_t i = 0; i < strs.n; i++)
        free(strs.v[i]);
    return 0;
}
