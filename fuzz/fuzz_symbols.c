/* libFuzzer harness: the ELF symbol and DWARF line readers on corrupt
 * files.
 *
 * Each input is an object file and, optionally, its separate debug file.
 * The object is written to DIR/obj, the debug file both where
 * .gnu_debuglink "fuzz.debug" points (DIR/fuzz.debug) and where a build-id
 * lookup finds it (DIR/debug/.build-id/xx/rest.debug, the debug
 * directories being DIR/debug only: no system file is ever read). Then the
 * symbolizer reads them as it reads a loaded module's files (symbol
 * tables, its own DWARF or the separate file's, compressed sections and
 * all) through snapprof__symbols_fuzz_file(), looks up the input's
 * addresses and every function's start, and frees everything again.
 * Checked besides the sanitizers: every symbol has a name, and file names
 * and lines are sane. Seeds (fuzz/corpus/symbols/) are small real objects:
 * with DWARF 4 and 5, with compressed debug sections, stripped with a
 * debug link, C++ with mangled names; libFuzzer's mutations truncate them,
 * break their offsets and counts and remove their build-ids. */
#include "fuzz_util.h"

#include "module_cache/module_cache.h"
#include "module_cache/symbols_dwarf.h"

#include <fcntl.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

static int g_verbose; /* SNAPPROF_FUZZ_VERBOSE: every symbol found */
static char g_dir[256], g_obj[300], g_link[300], g_debug_dir[300];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_scratch_dir("fuzz_symbols", g_dir, sizeof g_dir);
    snprintf(g_obj, sizeof g_obj, "%s/obj", g_dir);
    snprintf(g_link, sizeof g_link, "%s/fuzz.debug", g_dir);
    snprintf(g_debug_dir, sizeof g_debug_dir, "%s/debug", g_dir);
    FUZZ_CHECK(mkdir(g_debug_dir, 0700) == 0);
    FUZZ_CHECK(snapprof__symbols_set_debug_dirs(g_debug_dir) == 0);
    FUZZ_CHECK(elf_version(EV_CURRENT) != EV_NONE);
    g_verbose = getenv("SNAPPROF_FUZZ_VERBOSE") != NULL;
    return 0;
}

static void check_symbol(const snapprof_symbol_t *sym, void *arg)
{
    (void)arg;
    if (g_verbose)
        fprintf(stderr, "  %s (%s) %s:%d\n", sym->name, sym->system_name ? sym->system_name : "",
                sym->file ? sym->file : "?", sym->line);
    FUZZ_CHECK(sym->name != NULL);
    FUZZ_CHECK(strlen(sym->name) < (1u << 20));
    if (sym->system_name != NULL)
        FUZZ_CHECK(strlen(sym->system_name) < (1u << 20));
    if (sym->file != NULL)
        FUZZ_CHECK(strlen(sym->file) < (1u << 20));
    FUZZ_CHECK(sym->line >= 0);
}

/* Input: [flags][object size: 4][4 addresses: 8 each][object][debug file].
 * flags bit 0: the module has the object's build-id (else none). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    uint8_t flags = fuzz_u8(&in);
    uint32_t obj_size = 0;
    for (int i = 0; i < 4; i++)
        obj_size |= (uint32_t)fuzz_u8(&in) << (8 * i);
    uint64_t vaddrs[4];
    for (int i = 0; i < 4; i++)
        vaddrs[i] = fuzz_u64(&in);
    if (obj_size > in.n)
        obj_size = (uint32_t)in.n;
    const uint8_t *obj = in.p, *dbg = in.p + obj_size;
    size_t dbg_size = in.n - obj_size;

    fuzz_write_file(g_obj, O_TRUNC, obj, obj_size);
    char build_id[2 * 64 + 1] = "";
    /* elf_memory() may write to the image it reads; the input is const,
     * so the build-id is read from a copy. */
    char *copy = malloc(obj_size ? obj_size : 1);
    FUZZ_CHECK(copy != NULL);
    memcpy(copy, obj, obj_size);
    Elf *e = elf_memory(copy, obj_size);
    if (e != NULL) {
        snapprof__elf_build_id(e, build_id, sizeof build_id);
        elf_end(e);
    }
    free(copy);
    char id_path[600] = "";
    if (dbg_size > 0) {
        fuzz_write_file(g_link, O_TRUNC, dbg, dbg_size);
        if (strlen(build_id) > 2) {
            char sub[400];
            snprintf(sub, sizeof sub, "%s/.build-id/%.2s", g_debug_dir, build_id);
            char top[400];
            snprintf(top, sizeof top, "%s/.build-id", g_debug_dir);
            mkdir(top, 0700);
            mkdir(sub, 0700);
            snprintf(id_path, sizeof id_path, "%s/%s.debug", sub, build_id + 2);
            fuzz_write_file(id_path, O_TRUNC, dbg, dbg_size);
        }
    }
    int n = snapprof__symbols_fuzz_file(g_obj, (flags & 1) ? build_id : "", vaddrs, 4, check_symbol,
                                        NULL);
    FUZZ_CHECK(n >= 0);
    unlink(g_obj);
    if (dbg_size > 0)
        unlink(g_link);
    if (id_path[0] != '\0')
        unlink(id_path);
    return 0;
}
