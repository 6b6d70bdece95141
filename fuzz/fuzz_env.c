/* libFuzzer harness: the preload library's environment parser
 * (snapprof__config_from_env(), preload/preload_config.c).
 *
 * Each input is an environment: SNAPPROF_* and gperftools variables (any
 * of them, any number of times, the last one winning as setenv() would
 * have it) with arbitrary values. Checked besides the sanitizers: every
 * warning is one line, and a configuration that asks for a profile is
 * one the profiler can run: 1-4 outputs with absolute paths and known
 * formats, a frequency in range, a usable signal, a known trigger, a
 * summary directory that is absolute or empty, JIT layouts the library
 * takes. */
#include "fuzz_util.h"

#include "preload/preload_config.h"

#include <stdarg.h>

static const char *const g_names[] = {
    SNAPPROF_ENV_OUTPUT, SNAPPROF_ENV_FORMAT, SNAPPROF_ENV_FREQUENCY, SNAPPROF_ENV_MODE,
    SNAPPROF_ENV_SIGNAL, SNAPPROF_ENV_DURATION, SNAPPROF_ENV_FORK, SNAPPROF_ENV_TRIGGER,
    SNAPPROF_ENV_SUMMARY_DIR, SNAPPROF_ENV_ROOT_PID, SNAPPROF_ENV_CPUPROFILE,
    SNAPPROF_ENV_CPUPROFILE_FREQUENCY, SNAPPROF_ENV_CPUPROFILE_REALTIME,
    /* last: the seeds' bytes keep naming the others */
    SNAPPROF_ENV_JIT_LAYOUT, SNAPPROF_ENV_CRASH};
#define N_NAMES (sizeof g_names / sizeof g_names[0])
static char *g_values[N_NAMES];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static char *get(const char *name)
{
    for (size_t i = 0; i < N_NAMES; i++)
        if (strcmp(name, g_names[i]) == 0)
            return g_values[i];
    return NULL;
}

static void warn(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    FUZZ_CHECK(n >= 0);
}

/* Input: [variable][value\0] repeated. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    while (in.n > 0) {
        size_t k = fuzz_u8(&in) % N_NAMES;
        free(g_values[k]);
        g_values[k] = fuzz_str(&in);
    }
    static snapprof__preload_config_t cfg;
    int on = snapprof__config_from_env(&cfg, get, warn);
    FUZZ_CHECK(on == 0 || on == 1);
    if (on) {
        FUZZ_CHECK(cfg.n_outputs >= 1 && cfg.n_outputs <= SNAPPROF_OUTPUTS_MAX);
        for (unsigned i = 0; i < cfg.n_outputs; i++) {
            FUZZ_CHECK(cfg.outputs[i].path[0] == '/');
            FUZZ_CHECK(memchr(cfg.outputs[i].path, '\0', sizeof cfg.outputs[i].path) != NULL);
            FUZZ_CHECK(cfg.outputs[i].format < SNAPPROF__FORMAT_COUNT);
        }
        FUZZ_CHECK(cfg.hz >= SNAPPROF_HZ_MIN && cfg.hz <= SNAPPROF_HZ_MAX);
        FUZZ_CHECK(cfg.wall == 0 || cfg.wall == 1);
        FUZZ_CHECK(snapprof__signal_usable(cfg.signo));
        FUZZ_CHECK(cfg.trigger >= 0 && cfg.trigger <= 3);
        FUZZ_CHECK(cfg.duration_ns <= (uint64_t)(SNAPPROF_DURATION_MAX_S * 1e9) + 1);
        FUZZ_CHECK(cfg.summary_dir[0] == '\0' || cfg.summary_dir[0] == '/');
        /* Every JIT layout rule is one the library accepts. */
        FUZZ_CHECK(cfg.n_jit_rules <= SNAPPROF_JIT_RULES_MAX);
        for (unsigned i = 0; i < cfg.n_jit_rules; i++) {
            const snapprof_jit_layout_t *l = &cfg.jit_rules[i].layout;
            FUZZ_CHECK(memchr(cfg.jit_rules[i].prefix, '\0', sizeof cfg.jit_rules[i].prefix));
            FUZZ_CHECK(l->kind != SNAPPROF_JIT_LAYOUT_FIXED_FRAME ||
                       (l->frame_size % 8 == 0 && l->return_address_offset % 8 == 0 &&
                        l->return_address_offset + 8 <= l->frame_size &&
                        (l->saved_fp_offset == SNAPPROF_JIT_FP_UNCHANGED ||
                         (l->saved_fp_offset >= 0 && l->saved_fp_offset % 8 == 0 &&
                          (uint32_t)l->saved_fp_offset + 8 <= l->frame_size))));
        }
    }
    for (size_t i = 0; i < N_NAMES; i++) {
        free(g_values[i]);
        g_values[i] = NULL;
    }
    return 0;
}
