/* Names, files and lines of Python frames, out of band: a cache per code
 * object, filled at its first sight and kept after it is freed (read with
 * process_vm_readv, so a code object freed since the capture fails the
 * read instead of faulting, and checked to be live and the one captured
 * before it is named), the
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
    uintptr_t code; /* 0: a free slot */
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

/* Code objects by (address, names check, first line), as the handler
 * copied them: open addressing, grown by doubling up to CODE_MAX slots.
 * An entry stays after its code object is freed, so that captures that
 * wait for the drain while their code object is freed (a function made,
 * run and thrown away; the program's last milliseconds, drained after
 * Py_Finalize freed everything) are named from what was read while it
 * lived. A table CODE_MAX / 2 full is emptied and starts again (a program
 * that makes code objects forever): what is still alive is read again. */
#define CODE_MIN 4096u
#define CODE_MAX (1u << 17)
static code_entry_t *codes;
static size_t codes_cap, codes_n;

/* The handler's view of which code objects are named (python_internal.h):
 * every code object this cache names is added, at every lookup, so that
 * the set, emptied when half full or with the cache, fills again with
 * those still in use. A capture that meets a code object not in it wakes
 * the sampling thread (python_capture.c), whose drain then names the new
 * code object within milliseconds of its first sample, instead of at the
 * next periodic drain (200 ms): by then a program that makes and drops
 * functions (exec, a module reloaded) may have freed it, and its frames
 * would be "<code object freed>". A program that runs the code it has
 * pays nothing more than a probe per distinct code object a sample. */
_Atomic uint64_t snapprof__py_known[SNAPPROF__PY_KNOWN_SLOTS];
static size_t known_n;

static void known_clear(void)
{
    for (size_t i = 0; i < SNAPPROF__PY_KNOWN_SLOTS; i++)
        atomic_store_explicit(&snapprof__py_known[i], 0, memory_order_relaxed);
    known_n = 0;
}

/* Adds key. A key whose probes are all taken is left out: its captures
 * ask for early drains, as a new code object does. Lock held. */
static void known_add(uint64_t key)
{
    if (known_n >= SNAPPROF__PY_KNOWN_SLOTS / 2)
        known_clear();
    size_t i = (size_t)(key >> 17);
    for (unsigned p = 0; p < SNAPPROF__PY_KNOWN_PROBES; p++, i++) {
        _Atomic uint64_t *slot = &snapprof__py_known[i & (SNAPPROF__PY_KNOWN_SLOTS - 1)];
        uint64_t k = atomic_load_explicit(slot, memory_order_relaxed);
        if (k == key)
            return;
        if (k == 0) {
            atomic_store_explicit(slot, key, memory_order_relaxed);
            known_n++;
            return;
        }
    }
}

static size_t code_slot(uintptr_t code, uint64_t names, int32_t firstlineno, size_t cap)
{
    uint64_t h =
        ((uint64_t)code ^ names ^ ((uint64_t)(uint32_t)firstlineno << 40)) * 0x9e3779b97f4a7c15u;
    return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

static void codes_clear(void)
{
    known_clear();
    for (size_t i = 0; i < codes_cap; i++)
        free(codes[i].linetable);
    free(codes);
    codes = NULL;
    codes_cap = codes_n = 0;
}

/* Makes room for one more entry. Returns 0, -1 when out of memory. Lock
 * held. */
static int codes_reserve(void)
{
    if (codes_n + 1 <= codes_cap / 2)
        return 0;
    if (codes_cap >= CODE_MAX)
        codes_clear();
    size_t cap = codes_cap ? codes_cap * 2 : CODE_MIN;
    code_entry_t *t = calloc(cap, sizeof *t);
    if (t == NULL)
        return -1;
    for (size_t i = 0; i < codes_cap; i++) {
        const code_entry_t *e = &codes[i];
        if (e->code == 0)
            continue;
        size_t k = code_slot(e->code, e->names, e->firstlineno, cap);
        while (t[k].code != 0)
            k = (k + 1) & (cap - 1);
        t[k] = *e;
    }
    free(codes);
    codes = t;
    codes_cap = cap;
    return 0;
}

/* A str object's text as UTF-8 into buf (at most size - 1 bytes).
 * Returns 0, or -1 when it cannot be read or is not a live compact str. */
static int read_str(uintptr_t obj, char *buf, size_t size)
{
    const snapprof__py_layout_t *l = snapprof__py.layout;
    buf[0] = '\0';
    uint8_t hdr[128];
    if (obj == 0 || (obj & 7) || l->unicode_compact_data > sizeof hdr ||
        snapprof__py_read(obj, hdr, l->unicode_compact_data) < 0)
        return -1;
    intptr_t refcnt, len;
    uint32_t state;
    memcpy(&refcnt, hdr, sizeof refcnt);
    memcpy(&len, hdr + l->unicode_length, sizeof len);
    memcpy(&state, hdr + l->unicode_state, sizeof state);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    /* A freed object's first word is the allocator's free-list link (a
     * pointer, or 0), never a count a live object has. */
    if (refcnt <= 0 || refcnt >= ((intptr_t)1 << 32) || !compact || len < 0 ||
        (kind != 1 && kind != 2 && kind != 4))
        return -1;
    if (len > 1024)
        len = 1024;
    uint8_t raw[4096];
    uintptr_t data = obj + (ascii ? l->unicode_ascii_data : l->unicode_compact_data);
    if (snapprof__py_read(data, raw, (size_t)len * kind) < 0)
        return -1;
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
    return 0;
}

/* Reads the code object at code into e. Returns 0, or -1 when it cannot
 * be read, is not a live code object, or its names are not live strings
 * (a code object freed since the capture: its memory may still look like
 * one, with the pointers to its names, freed too, or reused by other
 * strings). */
static int load_code(uintptr_t code, code_entry_t *e)
{
    const snapprof__py_layout_t *l = snapprof__py.layout;
    uint8_t hdr[256];
    if (l->code_code > sizeof hdr || snapprof__py_read(code, hdr, l->code_code) < 0)
        return -1;
    uintptr_t type, filename, qualname, linetable;
    intptr_t refcnt, size;
    int32_t first;
    memcpy(&refcnt, hdr, sizeof refcnt);
    memcpy(&type, hdr + l->code_type, sizeof type);
    memcpy(&size, hdr + l->code_size, sizeof size);
    memcpy(&first, hdr + l->code_firstlineno, sizeof first);
    memcpy(&filename, hdr + l->code_filename, sizeof filename);
    memcpy(&qualname, hdr + l->code_qualname, sizeof qualname);
    memcpy(&linetable, hdr + l->code_linetable, sizeof linetable);
    if (refcnt <= 0 || refcnt >= ((intptr_t)1 << 32) || type != snapprof__py.code_type ||
        size < 0 || size > (1 << 28))
        return -1;
    char q[1024], f[4096];
    if (read_str(qualname, q, sizeof q) < 0 || read_str(filename, f, sizeof f) < 0)
        return -1;
    intptr_t lt_len = 0;
    uint8_t *lt = NULL;
    if (linetable != 0 &&
        snapprof__py_read(linetable + l->bytes_size, &lt_len, sizeof lt_len) == 0 && lt_len > 0 &&
        lt_len < (1 << 20) && (lt = malloc((size_t)lt_len)) != NULL &&
        snapprof__py_read(linetable + l->bytes_data, lt, (size_t)lt_len) < 0) {
        free(lt);
        lt = NULL;
    }
    *e = (code_entry_t){.code = code,
                        .names = snapprof__py_names_check(filename, qualname, size),
                        .firstlineno = first,
                        .size = (int32_t)size,
                        .qualname = intern_str(q),
                        .filename = intern_str(f),
                        .linetable = lt,
                        .linetable_len = lt ? (size_t)lt_len : 0,
                        .last_instr = -2};
    if (e->qualname == NULL || e->filename == NULL) {
        free(lt);
        e->linetable = NULL;
        return -1;
    }
    return 0;
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

void snapprof__py_names_lock(void)
{
    pthread_mutex_lock(&lock);
}

void snapprof__py_names_unlock(void)
{
    pthread_mutex_unlock(&lock);
}

uintptr_t snapprof__py_frame_pc(const snapprof__py_frame_rec_t *rec, int *reused)
{
    *reused = 0;
    if (module == NULL) /* made by snapprof__py_module(), outside the lock */
        return 0;
    uintptr_t code = rec->code & ~(uintptr_t)SNAPPROF__PY_REC_FLAGS;
    uintptr_t pc = 0;
    code_entry_t *e = NULL;
    if (codes_cap > 0) {
        size_t k = code_slot(code, rec->names, rec->firstlineno, codes_cap);
        for (; codes[k].code != 0; k = (k + 1) & (codes_cap - 1))
            if (codes[k].code == code && codes[k].names == rec->names &&
                codes[k].firstlineno == rec->firstlineno) {
                e = &codes[k];
                break;
            }
    }
    if (e == NULL) {
        /* First sight: read it as it is now. It must still be the one
         * captured (by address, names and first line); a code object freed
         * meanwhile, or another at its address, is not named. */
        code_entry_t n = {0};
        if (load_code(code, &n) < 0 || n.names != rec->names || n.firstlineno != rec->firstlineno) {
            free(n.linetable);
            *reused = 1;
            pc = symbol_pc("<code object freed>", "", 0);
            goto out;
        }
        if (codes_reserve() < 0) {
            free(n.linetable);
            goto out;
        }
        size_t k = code_slot(code, n.names, n.firstlineno, codes_cap);
        while (codes[k].code != 0)
            k = (k + 1) & (codes_cap - 1);
        codes[k] = n;
        codes_n++;
        e = &codes[k];
    }
    known_add(snapprof__py_known_key(code, rec->names, rec->firstlineno));
    if (e->last_instr == rec->instr && e->last_pc != 0) {
        pc = e->last_pc;
        goto out;
    }
    pc = symbol_pc(e->qualname, e->filename, line_of(e, rec->instr));
    e->last_instr = rec->instr;
    e->last_pc = pc;
out:
    return pc;
}
