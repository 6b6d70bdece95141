/* A stand-in for CPython under `python -X perf`, for test_jit_cpython.c:
 * it copies CPython's perf trampoline (Python/asm_trampoline.S) into
 * executable memory, names each copy in /tmp/perf-<pid>.map as CPython
 * does ("py::qualname:filename", the size of one copy), and runs
 *
 *   main -> jit_cpython_run -> jit_cpython_call -> py::outer
 *     -> jit_cpython_eval_outer -> jit_cpython_call -> py::inner_hot
 *     -> jit_cpython_burn
 *
 * where the py:: frames are trampolines and the rest is C built without
 * frame pointers (the interpreter's _PyEval_EvalFrameDefault in CPython).
 * jit_cpython_call puts junk in rbp before it calls a trampoline, as the
 * interpreter, which uses rbp as a general register, does. It knows
 * nothing of snapprof; it removes its perf map when it exits.
 *
 * Usage: jit_cpython_prog SECONDS [sub|endbr|push]
 *   SECONDS of CPU time to burn; the trampoline's shape: CPython 3.12's
 *   sub $8,%rsp form (the default), the same after an endbr64 (CET
 *   builds), or the push %rbp form. Prints "pid N" first. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef void (*fn_t)(void);

/* sub $8,%rsp; call *%rcx; add $8,%rsp; ret */
static const unsigned char k_sub[] = {0x48, 0x83, 0xec, 0x08, 0xff, 0xd1,
                                      0x48, 0x83, 0xc4, 0x08, 0xc3};
/* endbr64; then the same */
static const unsigned char k_endbr[] = {0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x83, 0xec, 0x08,
                                        0xff, 0xd1, 0x48, 0x83, 0xc4, 0x08, 0xc3};
/* push %rbp; mov %rsp,%rbp; call *%rcx; pop %rbp; ret */
static const unsigned char k_push[] = {0x55, 0x48, 0x89, 0xe5, 0xff, 0xd1, 0x5d, 0xc3};

/* jit_cpython_call(trampoline, fn): calls the trampoline with fn in rcx
 * (CPython passes _PyEval_EvalFrameDefault there) and junk in rbp. Its
 * CFI says where it saved the real rbp. */
void jit_cpython_call(const void *trampoline, fn_t fn);
__asm__(".text\n"
        ".globl jit_cpython_call\n"
        ".type jit_cpython_call, @function\n"
        "jit_cpython_call:\n"
        ".cfi_startproc\n"
        "push %rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset %rbp, -16\n"
        "mov %rsi, %rcx\n"
        "mov $0x5a5a5a5a, %ebp\n"
        "call *%rdi\n"
        "pop %rbp\n"
        ".cfi_def_cfa_offset 8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size jit_cpython_call, .-jit_cpython_call\n");

/* Copies of the trampoline, packed as CPython 3.12 packs them; which ones
 * the two functions got. */
#define COPIES 8
#define OUTER 3
#define INNER 5
static unsigned char *g_code;
static size_t g_size;
static char g_map[64];

static const void *copy(int i)
{
    return g_code + (size_t)i * g_size;
}

__attribute__((noinline)) void jit_cpython_burn(void)
{
    unsigned long x = 0;
    for (unsigned long i = 0; i < 2000000; i++) {
        x += i;
        __asm__ volatile("" : "+r"(x)); /* the loop stays a loop */
    }
}

__attribute__((noinline)) void jit_cpython_eval_outer(void)
{
    for (int i = 0; i < 4; i++)
        jit_cpython_call(copy(INNER), jit_cpython_burn);
    __asm__ volatile("" ::: "memory"); /* no tail call */
}

__attribute__((noinline)) void jit_cpython_run(void)
{
    jit_cpython_call(copy(OUTER), jit_cpython_eval_outer);
    __asm__ volatile("" ::: "memory");
}

static void remove_map(void)
{
    unlink(g_map);
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    const char *shape = argc > 2 ? argv[2] : "sub";
    const unsigned char *tramp = k_sub;
    g_size = sizeof k_sub;
    if (strcmp(shape, "endbr") == 0) {
        tramp = k_endbr;
        g_size = sizeof k_endbr;
    } else if (strcmp(shape, "push") == 0) {
        tramp = k_push;
        g_size = sizeof k_push;
    } else if (strcmp(shape, "sub") != 0) {
        fprintf(stderr, "usage: %s SECONDS [sub|endbr|push]\n", argv[0]);
        return 2;
    }
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    g_code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g_code == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (int i = 0; i < COPIES; i++)
        memcpy(g_code + (size_t)i * g_size, tramp, g_size);
    if (mprotect(g_code, 4096, PROT_READ | PROT_EXEC) != 0) {
        perror("mprotect");
        return 1;
    }
    snprintf(g_map, sizeof g_map, "/tmp/perf-%d.map", (int)getpid());
    atexit(remove_map);
    FILE *f = fopen(g_map, "w");
    if (f == NULL) {
        perror(g_map);
        return 1;
    }
    for (int i = 0; i < COPIES; i++) {
        const char *name = i == OUTER ? "outer" : i == INNER ? "inner_hot" : "unused";
        fprintf(f, "%lx %zx py::%s:jit_cpython_prog.py\n", (unsigned long)(uintptr_t)copy(i),
                g_size, name);
    }
    if (fclose(f) != 0) {
        perror(g_map);
        return 1;
    }
    double until = cpu_seconds() + seconds;
    unsigned long runs = 0;
    while (cpu_seconds() < until) {
        jit_cpython_run();
        runs++;
    }
    printf("%lu runs\n", runs);
    return 0;
}
