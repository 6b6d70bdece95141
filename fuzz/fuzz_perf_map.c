/* libFuzzer harness: the perf map reader (/tmp/perf-PID.map, written by
 * JITs that do not register their code: "START SIZE name" lines).
 *
 * Each input is a perf map written in stages, as a JIT writes one while
 * the profiler reads it: a stage appends to the file, truncates and
 * rewrites it in place, or replaces it with a new file; after each stage
 * the reader takes in what changed and addresses are looked up, now and
 * as of the start. The layout its regions get is the input's too (valid
 * or not). Checked besides the sanitizers: a region found holds the
 * address, is a JIT module and has a name, and the counters add up.
 * snapprof__jit_perf_map_forget() frees everything between inputs. */
#include "fuzz_util.h"

#include "module_cache/jit_regions.h"

#include <snapprof/jit.h>
#include <snapprof/snapprof.h>

#include <fcntl.h>
#include <unistd.h>

static char g_dir[256], g_path[300], g_tmp[300];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_scratch_dir("fuzz_perf_map", g_dir, sizeof g_dir);
    snprintf(g_path, sizeof g_path, "%s/perf.map", g_dir);
    snprintf(g_tmp, sizeof g_tmp, "%s/perf.map.new", g_dir);
    return 0;
}

static void look_up(uintptr_t addr)
{
    for (int k = 0; k < 2; k++) {
        const snapprof_module_t *m = snapprof__jit_find_after_miss(addr, k ? 1 : 0);
        if (m == NULL)
            continue;
        FUZZ_CHECK(m->kind == SNAPPROF_MODULE_JIT);
        FUZZ_CHECK(addr >= m->start && addr < m->limit);
        const snapprof__jit_region_t *r = snapprof__jit_region_of(m);
        FUZZ_CHECK(r != NULL && r->name != NULL && strlen(r->name) <= 64 * 1024);
    }
}

/* Input: [layout kind][frame size: 2][return address offset: 2]
 * [saved rbp offset: 1][4 addresses: 8 each] then stages separated by
 * 0xff bytes; a stage that starts with 0xfe truncates the file and writes
 * it anew, 0xfd replaces it with a new file, anything else is appended. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    snapprof_jit_layout_t layout = {0};
    layout.kind = (snapprof_jit_layout_kind_t)(fuzz_u8(&in) % 3);
    layout.frame_size = fuzz_u8(&in) | (uint32_t)fuzz_u8(&in) << 8;
    layout.return_address_offset = fuzz_u8(&in) | (uint32_t)fuzz_u8(&in) << 8;
    layout.saved_fp_offset = (int8_t)fuzz_u8(&in);
    uintptr_t addrs[4];
    for (int i = 0; i < 4; i++)
        addrs[i] = (uintptr_t)fuzz_u64(&in);

    snapprof__jit_perf_map_forget();
    unlink(g_path);
    if (snapprof_jit_perf_map_configure(g_path, &layout) != 0)
        FUZZ_CHECK(snapprof_jit_perf_map_configure(g_path, NULL) == 0);
    while (in.n > 0) {
        const uint8_t *end = memchr(in.p, 0xff, in.n);
        size_t len = end ? (size_t)(end - in.p) : in.n;
        const uint8_t *stage = in.p;
        in.p += len + (end != NULL);
        in.n -= len + (end != NULL);
        if (len > 0 && stage[0] == 0xfe) {
            fuzz_write_file(g_path, O_TRUNC, stage + 1, len - 1);
        } else if (len > 0 && stage[0] == 0xfd) {
            fuzz_write_file(g_tmp, O_TRUNC, stage + 1, len - 1);
            FUZZ_CHECK(rename(g_tmp, g_path) == 0);
        } else {
            fuzz_write_file(g_path, O_APPEND, stage, len);
        }
        snapprof__jit_perf_map_refresh_now();
        for (int i = 0; i < 4; i++)
            look_up(addrs[i]);
        /* Where the lines of this stage start, by the harness's own
         * reading: the first hex number of each line. */
        for (size_t at = 0; at < len;) {
            const uint8_t *nl = memchr(stage + at, '\n', len - at);
            size_t ll = nl ? (size_t)(nl - (stage + at)) : len - at;
            char buf[32];
            size_t k = ll < sizeof buf - 1 ? ll : sizeof buf - 1;
            memcpy(buf, stage + at, k);
            buf[k] = '\0';
            uintptr_t a = (uintptr_t)strtoull(buf, NULL, 16);
            look_up(a);
            look_up(a + 1);
            at += ll + 1;
        }
    }
    snapprof_jit_stats_t st;
    FUZZ_CHECK(snapprof_jit_get_stats(&st) == 0);
    FUZZ_CHECK(st.perf_map_replaced <= st.perf_map_lines);
    return 0;
}
