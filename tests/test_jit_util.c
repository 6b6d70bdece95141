/* A tiny x86-64 JIT for snapprof's JIT tests (see test_jit_util.h), and a
 * parser for `go tool pprof -traces`. */
#include "test_jit_util.h"
#include "test.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t page_round(size_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (size + page - 1) / page * page;
}

uint8_t *tj_map(size_t size)
{
    void *p =
        mmap(NULL, page_round(size), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        TEST_FAIL("mmap: %s", strerror(errno));
    return p;
}

void tj_protect_exec(uint8_t *base, size_t size)
{
    if (mprotect(base, page_round(size), PROT_READ | PROT_EXEC) != 0)
        TEST_FAIL("mprotect(RX): %s", strerror(errno));
}

void tj_protect_write(uint8_t *base, size_t size)
{
    if (mprotect(base, page_round(size), PROT_READ | PROT_WRITE) != 0)
        TEST_FAIL("mprotect(RW): %s", strerror(errno));
}

static uint8_t *put(uint8_t *p, const void *bytes, size_t n)
{
    memcpy(p, bytes, n);
    return p + n;
}

/* mov ecx, burn; 1: dec ecx; jnz 1b. A zero count spins once. */
static uint8_t *emit_spin(uint8_t *p, uint32_t burn)
{
    if (burn == 0)
        burn = 1;
    *p++ = 0xb9; /* mov ecx, imm32 */
    p = put(p, &burn, 4);
    static const uint8_t loop[] = {0xff, 0xc9, /* dec ecx */
                                   0x75, 0xfc /* jnz -4 */};
    return put(p, loop, sizeof loop);
}

/* movabs rax, callback; call rax */
static uint8_t *emit_call(uint8_t *p, tj_fn_t callback)
{
    uint64_t target = (uint64_t)(uintptr_t)callback;
    static const uint8_t movabs[] = {0x48, 0xb8};
    p = put(p, movabs, sizeof movabs);
    p = put(p, &target, 8);
    static const uint8_t call[] = {0xff, 0xd0};
    return put(p, call, sizeof call);
}

size_t tj_emit_fp(uint8_t *code, uint32_t burn, tj_fn_t callback)
{
    uint8_t *p = code;
    static const uint8_t prologue[] = {0x55, /* push rbp */
                                       0x48, 0x89, 0xe5 /* mov rbp, rsp */};
    p = put(p, prologue, sizeof prologue);
    p = emit_spin(p, burn);
    if (callback != NULL)
        p = emit_call(p, callback);
    static const uint8_t epilogue[] = {0x5d, /* pop rbp */
                                       0xc3 /* ret */};
    p = put(p, epilogue, sizeof epilogue);
    return (size_t)(p - code);
}

size_t tj_emit_fixed(uint8_t *code, uint32_t burn, tj_fn_t callback)
{
    uint8_t *p = code;
    static const uint8_t prologue[] = {
        0x48, 0x83, 0xec, 0x18,       /* sub rsp, 24 (rsp is 16-byte aligned after it) */
        0x48, 0x89, 0x6c, 0x24, 0x10, /* mov [rsp + 16], rbp */
        0xbd, 0x5a, 0x5a, 0x5a, 0x5a  /* mov ebp, 0x5a5a5a5a: rbp is junk now */
    };
    p = put(p, prologue, sizeof prologue);
    p = emit_spin(p, burn);
    if (callback != NULL)
        p = emit_call(p, callback);
    static const uint8_t epilogue[] = {
        0x48, 0x8b, 0x6c, 0x24, 0x10, /* mov rbp, [rsp + 16] */
        0x48, 0x83, 0xc4, 0x18,       /* add rsp, 24 */
        0xc3                          /* ret */
    };
    p = put(p, epilogue, sizeof epilogue);
    return (size_t)(p - code);
}

snapprof_jit_layout_t tj_fixed_layout(void)
{
    snapprof_jit_layout_t l;
    snapprof_jit_layout_init_fixed(&l, 32, 24);
    l.saved_fp_offset = 16;
    return l;
}

size_t tj_parse_traces(const char *text, tj_trace_t **out)
{
    size_t cap = 16, n = 0;
    tj_trace_t *traces = calloc(cap, sizeof *traces);
    ASSERT_NOT_NULL(traces);
    tj_trace_t *cur = NULL;
    int in_traces = 0; /* past the header (File:, Type:, ...) */
    const char *line = text;
    while (*line) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf - 1 ? len : sizeof buf - 1), line);
        line += len + (nl != NULL);
        if (strncmp(buf, "-----------+", 12) == 0) {
            cur = NULL;
            in_traces = 1;
            continue;
        }
        if (!in_traces)
            continue;
        const char *s = buf;
        while (*s == ' ')
            s++;
        if (*s == '\0')
            continue;
        const char *name;
        if (cur != NULL && s - buf >= 13) {
            name = s; /* a caller */
        } else {
            const char *tok_end = strchr(s, ' ');
            if (tok_end == NULL || tok_end[-1] == ':')
                continue; /* a label line, "thread_name:  main" */
            if (n == cap) {
                cap *= 2;
                traces = realloc(traces, cap * sizeof *traces);
                ASSERT_NOT_NULL(traces);
            }
            cur = &traces[n++];
            memset(cur, 0, sizeof *cur);
            cur->value = strtod(s, NULL);
            name = tok_end;
            while (*name == ' ')
                name++;
        }
        cur->names = realloc(cur->names, (cur->n + 1) * sizeof *cur->names);
        ASSERT_NOT_NULL(cur->names);
        cur->names[cur->n] = strdup(name);
        ASSERT_NOT_NULL(cur->names[cur->n]);
        cur->n++;
    }
    *out = traces;
    return n;
}

void tj_free_traces(tj_trace_t *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < t[i].n; k++)
            free(t[i].names[k]);
        free(t[i].names);
    }
    free(t);
}

int tj_trace_starts_with(const tj_trace_t *t, const char *const *names, size_t n)
{
    if (t->n < n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(t->names[i], names[i]) != 0)
            return 0;
    return 1;
}

snapprof_jit_stats_t tj_stats(void)
{
    snapprof_jit_stats_t st;
    ASSERT_OK(snapprof_jit_get_stats(&st));
    return st;
}
