/* A program for the preload tests to profile: it knows nothing of snapprof
 * (it is run under `snapprof record` or LD_PRELOAD), and each mode burns
 * CPU in functions with names the tests look for. Where one thread burns
 * alone, it burns on until a loaded profiler has 5 samples of it.
 *
 *   threads MS         threads from a constructor, from main, and one that
 *                      exits early; each names itself and burns MS ms
 *   burn NAME MS       burn in hot_a / hot_b / hot_c; copy stdin to stdout
 *   forkexec MS        a child that execs "burn hot_exec", a child that only
 *                      forks (hot_forked_child), the parent (hot_fork_parent)
 *   spin PIDFILE [handler]   burn in hot_spin (until a loaded profiler has 5
 *                      samples), write PIDFILE, burn until a signal ends it; with
 *                      "handler", SIGTERM sets a flag and main returns 0
 *   rmdir DIR MS       burn, then remove DIR (where the profile should go)
 *   sigurg MS          install its own SIGURG handler, send itself SIGURGs,
 *                      exit 3 unless its handler saw every one (or more)
 *   exit N             exit with status N
 *   fork_thread MS     fork from a thread other than main; the child burns
 *                      in hot_thread_fork_child
 *   fork_in_loader MS  fork while another thread holds the dynamic
 *                      loader's lock (inside a dl_iterate_phdr callback);
 *                      the child burns in hot_loader_fork_child and
 *                      _exit()s; prints how long the child took to end
 *   main_exit MS       main registers an atexit handler (it prints "atexit
 *                      ran"), starts a thread that burns in
 *                      hot_after_main_exit and calls pthread_exit()
 *   fork_thread_exit MS  fork from a thread other than main; the child
 *                      registers that atexit handler, burns in
 *                      hot_thread_fork_child and calls pthread_exit(): its
 *                      only thread ends without exit(), as a Python thread
 *                      that forked and returns does
 *   sleepers MS        three threads wait in nanosleep, a pipe read and
 *                      pthread_cond_timedwait (working 300 us between
 *                      waits) for MS ms; prints how many waits a signal
 *                      ended early
 *   seccomp HOW MS     once running, installs a seccomp filter that kills
 *                      the process for perf_event_open and process_vm_readv
 *                      (HOW: "prctl", PR_SET_SECCOMP on the main thread and
 *                      the threads it makes later; "syscall",
 *                      syscall(SYS_seccomp) with TSYNC, every thread), then
 *                      allocates (a heap profile samples on the allocating
 *                      thread) and runs as "threads MS" does; "strict"
 *                      instead starts a thread that burns, enters strict
 *                      mode (prctl), burns on, writes a line and ends with
 *                      SYS_exit, then runs as "threads MS" */
#include <dlfcn.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_prog.h"

HOT(hot_ctor_thread)
HOT(hot_worker_one)
HOT(hot_early_exit)
HOT(hot_main_thread)
HOT(hot_a)
HOT(hot_b)
HOT(hot_c)
HOT(hot_exec)
HOT(hot_forked_child)
HOT(hot_fork_parent)
HOT(hot_spin)
HOT(hot_thread_fork_child)
HOT(hot_after_main_exit)
HOT(hot_strict)

static uint64_t g_ms = 300;

/* ------------------------------------------------------------------------ */
/* threads                                                                  */
/* ------------------------------------------------------------------------ */

static pthread_t g_ctor_thread;
static int g_ctor_started;
static uint64_t g_ctor_ms;

static void *ctor_thread(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "ctor-worker");
    tp_burn_sampled(hot_ctor_thread, g_ctor_ms, 5);
    return NULL;
}

/* Started before main, from a constructor: the mode is not known yet, so
 * it looks at the environment the test sets. */
__attribute__((constructor)) static void start_ctor_thread(void)
{
    const char *ms = getenv("PRELOAD_PROG_CTOR_MS");
    if (!ms)
        return;
    g_ctor_ms = strtoull(ms, NULL, 10);
    g_ctor_started = pthread_create(&g_ctor_thread, NULL, ctor_thread, NULL) == 0;
}

static void *worker_one(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "worker-one");
    tp_burn_sampled(hot_worker_one, g_ms, 5);
    return NULL;
}

static void *early_exit(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "early-exit");
    tp_burn_sampled(hot_early_exit, g_ms / 2, 5);
    pthread_exit(NULL);
}

static int mode_threads(uint64_t ms)
{
    g_ms = ms; /* before the threads that read it start */
    /* One thread at a time, each burning until the profile has some more
     * samples (tp_burn_sampled): then those samples are its own, however
     * little CPU a loaded host leaves the sampler. */
    if (g_ctor_started)
        pthread_join(g_ctor_thread, NULL);
    else
        fprintf(stderr, "constructor thread was not started (PRELOAD_PROG_CTOR_MS unset)\n");
    pthread_t a, b;
    if (pthread_create(&b, NULL, early_exit, NULL) != 0)
        return 2;
    pthread_join(b, NULL); /* gone before the others start */
    if (pthread_create(&a, NULL, worker_one, NULL) != 0)
        return 2;
    pthread_join(a, NULL);
    tp_burn_sampled(hot_main_thread, ms, 5);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* burn, forkexec                                                           */
/* ------------------------------------------------------------------------ */

static int mode_burn(const char *name, uint64_t ms)
{
    if (!strcmp(name, "hot_a"))
        tp_burn_sampled(hot_a, ms, 5);
    else if (!strcmp(name, "hot_b"))
        tp_burn_sampled(hot_b, ms, 5);
    else if (!strcmp(name, "hot_c"))
        tp_burn_sampled(hot_c, ms, 5);
    else if (!strcmp(name, "hot_exec"))
        tp_burn_sampled(hot_exec, ms, 5);
    else
        return 2;
    printf("%s done\n", name);
    fflush(stdout);
    if (!isatty(0)) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, stdin)) > 0)
            fwrite(buf, 1, n, stdout);
    }
    return 0;
}

static int mode_forkexec(const char *self, uint64_t ms)
{
    char arg[32];
    snprintf(arg, sizeof arg, "%llu", (unsigned long long)ms);
    pid_t execd = fork();
    if (execd == 0) {
        execl(self, self, "burn", "hot_exec", arg, (char *)NULL);
        _exit(127);
    }
    pid_t forked = fork();
    if (forked == 0) {
        tp_burn_sampled(hot_forked_child, ms, 5);
        exit(0); /* exit handlers run: the child's profile is written */
    }
    tp_burn_sampled(hot_fork_parent, ms, 5);
    int st1, st2;
    waitpid(execd, &st1, 0);
    waitpid(forked, &st2, 0);
    printf("children %d %d\n", (int)execd, (int)forked);
    return WIFEXITED(st1) && WEXITSTATUS(st1) == 0 && WIFEXITED(st2) && WEXITSTATUS(st2) == 0 ? 0
                                                                                              : 4;
}

static void *fork_from_thread(void *arg)
{
    uint64_t ms = *(uint64_t *)arg;
    pid_t pid = fork();
    if (pid == 0) {
        tp_burn_sampled(hot_thread_fork_child, ms, 5);
        exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    return (void *)(intptr_t)(WIFEXITED(st) ? WEXITSTATUS(st) : 5);
}

/* main_exit and fork_thread_exit: the process ends when its last thread
 * does, with status 0 and its atexit handlers run (glibc calls exit(0)
 * there), whatever threads a profiler of its own keeps. */
static void say_atexit(void)
{
    printf("atexit ran\n");
    fflush(stdout);
}

static void *burn_after_main_exit(void *arg)
{
    tp_burn_sampled(hot_after_main_exit, *(uint64_t *)arg, 5);
    return NULL;
}

static int mode_main_exit(uint64_t ms)
{
    static uint64_t burn_ms;
    burn_ms = ms;
    atexit(say_atexit);
    pthread_t t;
    if (pthread_create(&t, NULL, burn_after_main_exit, &burn_ms) != 0)
        return 2;
    pthread_exit(NULL);
}

static void *fork_and_thread_exit(void *arg)
{
    uint64_t ms = *(uint64_t *)arg;
    pid_t pid = fork();
    if (pid == 0) {
        atexit(say_atexit);
        tp_burn_sampled(hot_thread_fork_child, ms, 5);
        pthread_exit(NULL);
    }
    int st;
    waitpid(pid, &st, 0);
    return (void *)(intptr_t)(WIFEXITED(st) ? WEXITSTATUS(st) : 5);
}

static int mode_fork_thread_exit(uint64_t ms)
{
    pthread_t t;
    void *ret;
    if (pthread_create(&t, NULL, fork_and_thread_exit, &ms) != 0)
        return 2;
    pthread_join(t, &ret);
    return (int)(intptr_t)ret;
}

static int mode_fork_thread(uint64_t ms)
{
    pthread_t t;
    void *ret;
    if (pthread_create(&t, NULL, fork_from_thread, &ms) != 0)
        return 2;
    pthread_join(t, &ret);
    return (int)(intptr_t)ret;
}

/* ------------------------------------------------------------------------ */
/* fork_in_loader                                                           */
/* ------------------------------------------------------------------------ */

HOT(hot_loader_fork_child)

static atomic_int g_in_loader, g_forked;

/* Runs with the loader's dl_load_write_lock held (glibc holds it around
 * dl_iterate_phdr's callbacks, as dlopen and dlclose do around their
 * changes), until the main thread has forked, or 0.5 s at most: the
 * profiler's sampling thread may enter the loader meanwhile, holding the
 * sampler lock that fork() waits for, and dlopen() too holds the lock only
 * briefly. */
static int hold_loader_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)info;
    (void)size;
    (void)data;
    atomic_store(&g_in_loader, 1);
    for (int i = 0; i < 500 && !atomic_load(&g_forked); i++)
        usleep(1000);
    return 1;
}

static void *hold_loader(void *arg)
{
    (void)arg;
    dl_iterate_phdr(hold_loader_cb, NULL);
    return NULL;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int mode_fork_in_loader(uint64_t ms)
{
    pthread_t t;
    if (pthread_create(&t, NULL, hold_loader, NULL) != 0)
        return 2;
    while (!atomic_load(&g_in_loader))
        usleep(1000);
    pid_t pid = fork();
    if (pid == 0) {
        hot_loader_fork_child(ms);
        _exit(0);
    }
    atomic_store(&g_forked, 1);
    pthread_join(t, NULL);
    if (pid < 0)
        return 2;
    uint64_t t0 = mono_ms();
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 3;
    /* From the parent's join on: the child's work, its _exit() and any
     * wait of ours in it. */
    printf("child %d ended %llu ms after the loader was free\n", (int)pid,
           (unsigned long long)(mono_ms() - t0));
    return 0;
}

/* ------------------------------------------------------------------------ */
/* spin, rmdir, sigurg                                                      */
/* ------------------------------------------------------------------------ */

static volatile sig_atomic_t g_term;

static void on_term(int signo)
{
    (void)signo;
    g_term = 1;
}

static int mode_spin(const char *pidfile, int own_handler)
{
    if (own_handler)
        signal(SIGTERM, on_term);
    /* The tests signal us as soon as the pid file is there, and judge the
     * profile: it must have samples by then. */
    tp_burn_sampled(hot_spin, 100, 5);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", pidfile);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return 2;
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    rename(tmp, pidfile);
    while (!g_term)
        hot_spin(10);
    return 0;
}

static int mode_rmdir(const char *dir, uint64_t ms)
{
    tp_burn_sampled(hot_a, ms, 5);
    if (rmdir(dir) != 0) {
        perror("rmdir");
        return 2;
    }
    return 0;
}

static atomic_int g_urgs, g_urg_bad_masks;

/* Runs under the mask the program asked for: SIGURG and its sa_mask's
 * SIGUSR1 blocked, SIGUSR2 not. */
static void on_urg(int signo)
{
    (void)signo;
    sigset_t m;
    pthread_sigmask(SIG_BLOCK, NULL, &m);
    if (!sigismember(&m, SIGURG) || !sigismember(&m, SIGUSR1) || sigismember(&m, SIGUSR2))
        atomic_fetch_add(&g_urg_bad_masks, 1);
    atomic_fetch_add(&g_urgs, 1);
}

static int mode_sigurg(uint64_t ms)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_urg;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR1);
    if (sigaction(SIGURG, &sa, NULL) != 0)
        return 2;
    /* What the program set is what it reads back. */
    if (sigaction(SIGURG, NULL, &old) != 0 || old.sa_handler != on_urg) {
        fprintf(stderr, "sigaction(SIGURG) reads back another handler\n");
        return 3;
    }
    hot_a(ms);
    for (int i = 0; i < 5; i++)
        raise(SIGURG);
    hot_b(ms / 3);
    /* At least its own 5: snapprof passes each SIGURG of its own on too,
     * since one may have absorbed the program's (a standard signal sent
     * while another is pending is dropped); a SIGURG handler must expect
     * spurious ones. */
    if (atomic_load(&g_urgs) < 5) {
        fprintf(stderr, "own SIGURG handler ran %d times, fewer than 5\n", atomic_load(&g_urgs));
        return 3;
    }
    if (atomic_load(&g_urg_bad_masks) != 0) {
        fprintf(stderr, "own SIGURG handler ran %d times under another mask than its own\n",
                atomic_load(&g_urg_bad_masks));
        return 3;
    }
    printf("own handler saw its 5 SIGURG\n");
    return 0;
}

static atomic_int g_sleepers_stop, g_early;
static atomic_uint g_reads; /* bytes sleeper_read has read */
static int g_pipe[2];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;

static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* About 300 us of this thread's CPU time. */
static void work_a_little(void)
{
    uint64_t t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    while (clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0 < 300000u)
        ;
}

__attribute__((noinline)) static void sleeper_nanosleep(void)
{
    while (!atomic_load(&g_sleepers_stop)) {
        work_a_little();
        struct timespec ts = {0, 2000000};
        if (nanosleep(&ts, NULL) != 0 && errno == EINTR)
            atomic_fetch_add(&g_early, 1);
    }
}

__attribute__((noinline)) static void sleeper_read(void)
{
    char c;
    while (!atomic_load(&g_sleepers_stop)) {
        work_a_little();
        ssize_t got = read(g_pipe[0], &c, 1);
        if (got < 0 && errno == EINTR)
            atomic_fetch_add(&g_early, 1);
        else if (got == 1)
            atomic_fetch_add(&g_reads, 1);
    }
}

__attribute__((noinline)) static void sleeper_cond(void)
{
    pthread_mutex_lock(&g_mu);
    while (!atomic_load(&g_sleepers_stop)) {
        work_a_little();
        uint64_t deadline = clock_ns(CLOCK_REALTIME) + 2000000u;
        struct timespec ts = {(time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u)};
        /* Nobody signals the condition before the end: an early return
         * was a signal's doing. */
        if (pthread_cond_timedwait(&g_cv, &g_mu, &ts) == 0 && !atomic_load(&g_sleepers_stop) &&
            clock_ns(CLOCK_REALTIME) < deadline)
            atomic_fetch_add(&g_early, 1);
    }
    pthread_mutex_unlock(&g_mu);
}

static void *sleeper_thread(void *arg)
{
    ((void (*)(void))arg)();
    return NULL;
}

static int mode_sleepers(uint64_t ms)
{
    if (pipe(g_pipe) != 0)
        return 2;
    void (*const fns[3])(void) = {sleeper_nanosleep, sleeper_read, sleeper_cond};
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, sleeper_thread, (void *)fns[i]);
    uint64_t end = clock_ns(CLOCK_MONOTONIC) + ms * 1000000u;
    /* The reader's data: a byte 2 ms after it has read the last one, so
     * that each of its reads waits (blocked) at least 2 ms. A byte every
     * 2 ms whether read or not left a reader short of CPU (load ~25 on 2
     * CPUs) a full pipe: its reads never blocked, and --wall-blocked proc's
     * profile had no blocked sample in sleeper_read (record_wall_proc). */
    unsigned written = 0;
    while (clock_ns(CLOCK_MONOTONIC) < end) {
        usleep(2000);
        if (atomic_load(&g_reads) != written)
            continue;
        if (write(g_pipe[1], "x", 1) != 1)
            return 2;
        written++;
    }
    atomic_store(&g_sleepers_stop, 1);
    if (write(g_pipe[1], "x", 1) != 1)
        return 2;
    pthread_mutex_lock(&g_mu);
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    printf("early returns: %d\n", atomic_load(&g_early));
    return 0;
}

/* ------------------------------------------------------------------------ */
/* seccomp                                                                  */
/* ------------------------------------------------------------------------ */

/* Burns (armed by the profiler meanwhile), enters strict mode, after
 * which only read, write, exit and sigreturn are allowed, and burns on: a
 * sample's signal handler on this thread would be killed for its system
 * calls. The line goes out with write(), the thread ends with the exit
 * system call (pthread_exit would make others). */
static void *strict_thread(void *arg)
{
    (void)arg;
    hot_strict(g_ms / 3);
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT, 0, 0, 0) != 0) {
        perror("prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT)");
        exit(3);
    }
    hot_strict(g_ms);
    static const char line[] = "strict thread ran\n";
    if (write(1, line, sizeof line - 1) < 0)
        syscall(SYS_exit, 4);
    syscall(SYS_exit, 0);
    return NULL;
}

static int mode_seccomp(const char *how, uint64_t ms)
{
    /* Running for a while first: the profiler has armed this thread and
     * read memory before the filter comes. */
    tp_burn_sampled(hot_a, ms / 3, 2);
    if (!strcmp(how, "strict")) {
        g_ms = ms;
        pthread_t t;
        if (pthread_create(&t, NULL, strict_thread, NULL) != 0)
            return 2;
        pthread_join(t, NULL);
        return mode_threads(ms);
    }
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_perf_event_open, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        perror("prctl(PR_SET_NO_NEW_PRIVS)");
        return 3;
    }
    long rc = !strcmp(how, "prctl")
                  ? prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0)
                  : syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
    if (rc != 0) {
        perror("seccomp filter");
        return 3;
    }
    /* With --heap, the samples of these are taken on this thread, which
     * the filter holds in either case. */
    for (int i = 0; i < 2000; i++) {
        char *volatile p = malloc(4096 + (size_t)i);
        if (p)
            p[0] = 1;
        free(p);
    }
    return mode_threads(ms);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    uint64_t ms = argc > 2 ? strtoull(argv[argc - 1], NULL, 10) : 300;
    if (!strcmp(mode, "threads"))
        return mode_threads(ms);
    if (!strcmp(mode, "burn") && argc > 3)
        return mode_burn(argv[2], ms);
    if (!strcmp(mode, "forkexec"))
        return mode_forkexec(argv[0], ms);
    if (!strcmp(mode, "fork_thread"))
        return mode_fork_thread(ms);
    if (!strcmp(mode, "main_exit"))
        return mode_main_exit(ms);
    if (!strcmp(mode, "fork_thread_exit"))
        return mode_fork_thread_exit(ms);
    if (!strcmp(mode, "fork_in_loader"))
        return mode_fork_in_loader(ms);
    if (!strcmp(mode, "spin") && argc > 2)
        return mode_spin(argv[2], argc > 3 && !strcmp(argv[3], "handler"));
    if (!strcmp(mode, "rmdir") && argc > 3)
        return mode_rmdir(argv[2], ms);
    if (!strcmp(mode, "sigurg"))
        return mode_sigurg(ms);
    if (!strcmp(mode, "sleepers"))
        return mode_sleepers(ms);
    if (!strcmp(mode, "exit") && argc > 2)
        return atoi(argv[2]);
    if (!strcmp(mode, "seccomp") && argc > 3)
        return mode_seccomp(argv[2], ms);
    fprintf(
        stderr,
        "usage: %s "
        "threads|burn|forkexec|fork_thread|fork_thread_exit|main_exit|fork_in_loader|spin|rmdir|"
        "sigurg|sleepers|exit|seccomp "
        "...\n",
        argv[0]);
    return 2;
}
