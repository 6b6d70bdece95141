/* Names, files and lines of Python frames, out of band: a cache per code
 * object (read with process_vm_readv, so a code object freed since the
 * capture fails the read or shows other names instead of faulting), the
 * 3.11 line table, and the "[python]" pseudo module whose pcs stand for
 * one (qualname, filename, line) each. Sampling side; the builders'
 * symbolization reads the symbols under the same lock. */
#include "python/python_internal.h"

#include "module_cache/module_cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The pseudo module's range: far from any user-space address. */
#define PY_PC_BASE ((uintptr_t)0x5059000000000000u)
#define PY_PC_SPAN ((uintptr_t)1 << 32)

typedef struct py_symbol {
    const char *qualname, *filename; /* interned: equal strings, equal pointers */
    int line;
    /* "py::" + qualname: a system name other than the name tells pprof
     * the name is final, where it would otherwise take "<module>" or
     * "f.<locals>.g" for a C++ name and cut its "template arguments". */
    const char *system_name;
} py_symbol_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static py_symbol_t *symbols;
static size_t nsymbols, capsymbols;
static const snapprof_module_t *module;

/* ------------------------------------------------------------------------ */
/* Interning                                                                */
/* ------------------------------------------------------------------------ */

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3u;
    return h;
}

/* Open addressing over strings, then over symbols; both only grow. */
static const char **strs;
static size_t strs_cap, strs_n;

static const char *intern_str(const char *s)
{
    if (strs_n * 2 >= strs_cap) {
        size_t cap = strs_cap ? strs_cap * 2 : 1024;
        const char **t = calloc(cap, sizeof *t);
        if (t == NULL)
            return NULL;
        for (size_t i = 0; i < strs_cap; i++)
            if (strs[i]) {
                size_t k = hash_bytes(strs[i], strlen(strs[i]), 0xcbf29ce484222325u) & (cap - 1);
                while (t[k])
                    k = (k + 1) & (cap - 1);
                t[k] = strs[i];
            }
        free(strs);
        strs = t;
        strs_cap = cap;
    }
    size_t k = hash_bytes(s, strlen(s), 0xcbf29ce484222325u) & (strs_cap - 1);
    while (strs[k]) {
        if (strcmp(strs[k], s) == 0)
            return strs[k];
        k = (k + 1) & (strs_cap - 1);
    }
    char *c = strdup(s);
    if (c == NULL)
        return NULL;
    strs[k] = c;
    strs_n++;
    return c;
}

static uint32_t *sym_idx; /* index + 1 of each symbol, by hash */
static size_t sym_idx_cap;

static uint64_t sym_hash(const py_symbol_t *s)
{
    uint64_t h = hash_bytes(&s->qualname, sizeof s->qualname, 0xcbf29ce484222325u);
    h = hash_bytes(&s->filename, sizeof s->filename, h);
    return hash_bytes(&s->line, sizeof s->line, h);
}

/* The pc of symbol (qualname, filename, line), made on first use; 0 when
 * out of memory. Lock held. */
static uintptr_t symbol_pc(const char *qualname, const char *filename, int line)
{
    py_symbol_t key = {intern_str(qualname), intern_str(filename), line, NULL};
    if (key.qualname == NULL || key.filename == NULL)
        return 0;
    if (nsymbols * 2 >= sym_idx_cap) {
        size_t cap = sym_idx_cap ? sym_idx_cap * 2 : 1024;
        uint32_t *t = calloc(cap, sizeof *t);
        if (t == NULL)
            return 0;
        for (size_t i = 0; i < nsymbols; i++) {
            size_t k = sym_hash(&symbols[i]) & (cap - 1);
            while (t[k])
                k = (k + 1) & (cap - 1);
            t[k] = (uint32_t)i + 1;
        }
        free(sym_idx);
        sym_idx = t;
        sym_idx_cap = cap;
    }
    size_t k = sym_hash(&key) & (sym_idx_cap - 1);
    while (sym_idx[k]) {
        const py_symbol_t *s = &symbols[sym_idx[k] - 1];
        if (s->qualname == key.qualname && s->filename == key.filename && s->line == key.line)
            return PY_PC_BASE + sym_idx[k] - 1;
        k = (k + 1) & (sym_idx_cap - 1);
    }
    if (nsymbols == capsymbols) {
        size_t cap = capsymbols ? capsymbols * 2 : 1024;
        py_symbol_t *t = realloc(symbols, cap * sizeof *t);
        if (t == NULL || cap >= PY_PC_SPAN)
            return 0;
        symbols = t;
        capsymbols = cap;
    }
    char sys[1100];
    snprintf(sys, sizeof sys, "py::%s", key.qualname);
    if ((key.system_name = intern_str(sys)) == NULL)
        return 0;
    symbols[nsymbols] = key;
    sym_idx[k] = (uint32_t)++nsymbols;
    return PY_PC_BASE + nsymbols - 1;
}

/* The pseudo module's symbolizer (module_cache.h): its pcs are indexes. */
static int symbolize(uintptr_t pc, snapprof_symbol_t *out, size_t max)
{
    if (max == 0)
        return 0;
    pthread_mutex_lock(&lock);
    int n = 0;
    if (pc >= PY_PC_BASE && pc - PY_PC_BASE < nsymbols) {
        const py_symbol_t *s = &symbols[pc - PY_PC_BASE];
        out[0] = (snapprof_symbol_t){.name = s->qualname,
                                     .system_name = s->system_name,
                                     .file = s->filename[0] ? s->filename : NULL,
                                     .line = s->line};
        n = 1;
    }
    pthread_mutex_unlock(&lock);
    return n;
}

const snapprof_module_t *snapprof__py_module(void)
{
    if (module == NULL)
        module =
            snapprof__module_pseudo_add("[python]", PY_PC_BASE, PY_PC_BASE + PY_PC_SPAN, symbolize);
    return module;
}

/* ------------------------------------------------------------------------ */
/* Code objects                                                             */
/* ------------------------------------------------------------------------ */

typedef struct code_entry {
    uintptr_t code;
    uint64_t names;
    int32_t firstlineno;
    int32_t size; /* code units */
    const char *qualname, *filename;
    uint8_t *linetable;
    size_t linetable_len;
    /* The last instruction looked up and its pc. */
    int32_t last_instr;
    uintptr_t last_pc;
} code_entry_t;

#define CODE_CACHE 8192
static code_entry_t cache[CODE_CACHE];

/* A str object's text as UTF-8 into buf (at most size - 1 bytes); "?"
 * when it cannot be read. */
static void read_str(uintptr_t obj, char *buf, size_t size)
{
    const snapprof__py_layout_t *l = snapprof__py.layout;
    strcpy(buf, "?");
    uint8_t hdr[128];
    if (obj == 0 || l->unicode_compact_data > sizeof hdr ||
        snapprof__py_read(obj, hdr, l->unicode_compact_data) < 0)
        return;
    intptr_t len;
    uint32_t state;
    memcpy(&len, hdr + l->unicode_length, sizeof len);
    memcpy(&state, hdr + l->unicode_state, sizeof state);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact || len < 0 || (kind != 1 && kind != 2 && kind != 4))
        return;
    if (len > 1024)
        len = 1024;
    uint8_t raw[4096];
    uintptr_t data = obj + (ascii ? l->unicode_ascii_data : l->unicode_compact_data);
    if (snapprof__py_read(data, raw, (size_t)len * kind) < 0)
        return;
    size_t o = 0;
    for (intptr_t i = 0; i < len; i++) {
        uint32_t c = kind == 1 ? raw[i] : kind == 2 ? ((uint16_t *)raw)[i] : ((uint32_t *)raw)[i];
        uint8_t u[4];
        size_t k;
        if (c < 0x80) {
            u[0] = (uint8_t)c;
            k = 1;
        } else if (c < 0x800) {
            u[0] = (uint8_t)(0xc0 | c >> 6);
            u[1] = (uint8_t)(0x80 | (c & 0x3f));
            k = 2;
        } else if (c < 0x10000) {
            u[0] = (uint8_t)(0xe0 | c >> 12);
            u[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
            u[2] = (uint8_t)(0x80 | (c & 0x3f));
            k = 3;
        } else {
            u[0] = (uint8_t)(0xf0 | c >> 18);
            u[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3f));
            u[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
            u[3] = (uint8_t)(0x80 | (c & 0x3f));
            k = 4;
        }
        if (o + k >= size)
            break;
        memcpy(buf + o, u, k);
        o += k;
    }
    buf[o] = '\0';
}

static uint64_t names_check(uintptr_t filename, uintptr_t qualname)
{
    uint64_t h = (uint64_t)filename * 0x9e3779b97f4a7c15u;
    h ^= (uint64_t)qualname + (h >> 29);
    return h | 1;
}

/* Reads the code object at code into e. Returns 0, or -1 when it cannot
 * be read or is not a code object. */
static int load_code(uintptr_t code, code_entry_t *e)
{
    const snapprof__py_layout_t *l = snapprof__py.layout;
    uint8_t hdr[256];
    if (l->code_code > sizeof hdr || snapprof__py_read(code, hdr, l->code_code) < 0)
        return -1;
    uintptr_t type, filename, qualname, linetable;
    intptr_t size;
    int32_t first;
    memcpy(&type, hdr + l->code_type, sizeof type);
    memcpy(&size, hdr + l->code_size, sizeof size);
    memcpy(&first, hdr + l->code_firstlineno, sizeof first);
    memcpy(&filename, hdr + l->code_filename, sizeof filename);
    memcpy(&qualname, hdr + l->code_qualname, sizeof qualname);
    memcpy(&linetable, hdr + l->code_linetable, sizeof linetable);
    if (type != snapprof__py.code_type || size < 0 || size > (1 << 28))
        return -1;
    char q[1024], f[4096];
    read_str(qualname, q, sizeof q);
    read_str(filename, f, sizeof f);
    intptr_t lt_len = 0;
    uint8_t *lt = NULL;
    if (linetable != 0 &&
        snapprof__py_read(linetable + l->bytes_size, &lt_len, sizeof lt_len) == 0 && lt_len > 0 &&
        lt_len < (1 << 20) && (lt = malloc((size_t)lt_len)) != NULL &&
        snapprof__py_read(linetable + l->bytes_data, lt, (size_t)lt_len) < 0) {
        free(lt);
        lt = NULL;
    }
    free(e->linetable);
    *e = (code_entry_t){.code = code,
                        .names = names_check(filename, qualname),
                        .firstlineno = first,
                        .size = (int32_t)size,
                        .qualname = intern_str(q),
                        .filename = intern_str(f),
                        .linetable = lt,
                        .linetable_len = lt ? (size_t)lt_len : 0,
                        .last_instr = -2};
    return e->qualname && e->filename ? 0 : -1;
}

/* The 3.11 location table (Objects/locations.md): entries of a first byte
 * 1CCCCLLL (code C, L + 1 code units), then, by code: 15 none; 14 long
 * form (signed varint line delta, then end line, column, end column
 * varints); 13 no columns (signed varint line delta); 10-12 one line,
 * delta C - 10, two column bytes; 0-9 short form, one column byte. */
static int read_varint(const uint8_t *t, size_t n, size_t *i, uint32_t *out)
{
    uint32_t v = 0;
    unsigned shift = 0;
    for (;;) {
        if (*i >= n || shift > 28)
            return -1;
        uint8_t b = t[(*i)++];
        v |= (uint32_t)(b & 63) << shift;
        shift += 6;
        if (!(b & 64))
            break;
    }
    *out = v;
    return 0;
}

static int line_of(const code_entry_t *e, int32_t instr)
{
    int line = e->firstlineno;
    if (instr < 0 || e->linetable == NULL)
        return line;
    const uint8_t *t = e->linetable;
    size_t n = e->linetable_len, i = 0;
    int64_t addr = 0;
    while (i < n) {
        uint8_t b = t[i++];
        int units = (b & 7) + 1, code = (b >> 3) & 15, delta = 0;
        uint32_t v;
        if (code == 14) {
            if (read_varint(t, n, &i, &v) < 0)
                break;
            delta = (v & 1) ? -(int)(v >> 1) : (int)(v >> 1);
            for (int k = 0; k < 3; k++)
                if (read_varint(t, n, &i, &v) < 0)
                    return line;
        } else if (code == 13) {
            if (read_varint(t, n, &i, &v) < 0)
                break;
            delta = (v & 1) ? -(int)(v >> 1) : (int)(v >> 1);
        } else if (code >= 10 && code <= 12) {
            delta = code - 10;
            i += 2;
        } else if (code < 10) {
            i += 1;
        }
        line += delta;
        addr += units;
        if (addr > instr)
            break;
    }
    return line;
}

uintptr_t snapprof__py_frame_pc(const snapprof__py_frame_rec_t *rec, int *reused)
{
    *reused = 0;
    if (snapprof__py_module() == NULL)
        return 0;
    uintptr_t code = rec->code & ~(uintptr_t)SNAPPROF__PY_REC_FLAGS;
    /* By address and names: a code object freed and its address reused
     * by another one while captures of the first wait to be drained keeps
     * its entry beside the newcomer's. */
    code_entry_t *e = &cache[((code >> 4) ^ rec->names ^ (rec->names >> 32)) % CODE_CACHE];
    pthread_mutex_lock(&lock);
    uintptr_t pc = 0;
    if (e->code != code || e->names != rec->names || e->firstlineno != rec->firstlineno) {
        /* Not cached, or cached for an older object at the same address:
         * read it as it is now. */
        if (load_code(code, e) < 0) {
            e->code = 0;
            *reused = 1;
            pc = symbol_pc("<code object freed>", "", 0);
            goto out;
        }
        if (e->names != rec->names || e->firstlineno != rec->firstlineno) {
            /* Another code object lives there now: not the one captured. */
            *reused = 1;
            pc = symbol_pc("<code object freed>", "", 0);
            goto out;
        }
    }
    if (e->last_instr == rec->instr && e->last_pc != 0) {
        pc = e->last_pc;
        goto out;
    }
    pc = symbol_pc(e->qualname, e->filename, line_of(e, rec->instr));
    e->last_instr = rec->instr;
    e->last_pc = pc;
out:
    pthread_mutex_unlock(&lock);
    return pc;
}
