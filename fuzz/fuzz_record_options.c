/* libFuzzer harness: the option parser of `snapprof record`
 * (cli/snapprof_record.c) and the output plan it makes.
 *
 * Each input is a command line: arguments separated by NUL bytes. The
 * parser is static and reports a bad option by printing and exiting, as a
 * command should; so this file compiles snapprof_record.c into itself with
 * exit() turned into a jump back here and its output sent to /dev/null.
 * Nothing else of the command runs (no program is started). Checked
 * besides the sanitizers: a command line that parses names a command and
 * a frequency in range, and its outputs plan out to at most four absolute
 * paths or fail with a reason. */
#include "fuzz_util.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

static jmp_buf g_exit_jump;
static int g_exit_status;
static FILE *g_null;

static __attribute__((noreturn)) void fuzz_exit(int status)
{
    g_exit_status = status;
    longjmp(g_exit_jump, 1);
}

#undef stderr
#undef stdout
#define exit(status) fuzz_exit(status)
#define stderr g_null
#define stdout g_null
#include "cli/snapprof_record.c"
#undef exit
#undef stderr
#undef stdout
#define stderr stderr /* as <stdio.h> has them */
#define stdout stdout

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    g_null = fopen("/dev/null", "w");
    FUZZ_CHECK(g_null != NULL);
    return 0;
}

/* Input: the arguments after "record", each ended by a NUL. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    char *args[64];
    int argc = 0;
    while (in.n > 0 && argc < 63)
        args[argc++] = fuzz_str(&in);
    args[argc] = NULL;
    /* The parser keeps pointers into argv; a copy of the array, so that
     * the strings can be freed whatever it did. */
    char *argv[64];
    memcpy(argv, args, sizeof argv);
    static options_t o;
    if (setjmp(g_exit_jump) == 0) {
        parse_options(argc, argv, &o);
        FUZZ_CHECK(o.cmd != NULL && o.cmd[0] != NULL);
        FUZZ_CHECK(o.hz >= SNAPPROF_HZ_MIN && o.hz <= SNAPPROF_HZ_MAX);
        FUZZ_CHECK(o.n_paths <= SNAPPROF_OUTPUTS_MAX && o.n_formats <= SNAPPROF_OUTPUTS_MAX);
        static snapprof__output_spec_t outputs[SNAPPROF_OUTPUTS_MAX];
        unsigned n = 0;
        char why[256] = "";
        if (snapprof__plan_outputs(o.paths, o.n_paths, o.formats, o.n_formats, outputs, &n, why,
                                   sizeof why) == 0) {
            FUZZ_CHECK(n >= 1 && n <= SNAPPROF_OUTPUTS_MAX);
            for (unsigned i = 0; i < n; i++)
                FUZZ_CHECK(outputs[i].path[0] == '/' && outputs[i].format < SNAPPROF__FORMAT_COUNT);
        } else {
            FUZZ_CHECK(why[0] != '\0');
        }
    } else {
        /* Exited: --help (0) or a usage error. */
        FUZZ_CHECK(g_exit_status == 0 || g_exit_status == EXIT_USAGE);
    }
    for (int i = 0; i < argc; i++)
        free(args[i]);
    return 0;
}
