/* The profile of a crashing program: SIGSEGV, SIGBUS, SIGFPE, SIGILL and
 * SIGABRT, while the program leaves them at SIG_DFL, first have the profile
 * written, then end the process by their default action, so the exit status
 * and the core dump are the crash's.
 *
 * Only the default disposition is ours to act on: a program that handles a
 * fault signal itself (Go, the JVM, ASan, a crash reporter) has its handler
 * installed for real, exactly as it asked, and ours steps aside until the
 * program sets SIG_DFL again; sigaction() and signal() show the program what
 * it set, never our handler (the interposed ones in preload_signals.c hand
 * these signals here). abort() raises SIGABRT through the disposition in
 * force, so it takes the same path.
 *
 * The crashing thread writes nothing itself: it may have crashed inside
 * malloc or under a lock the writer needs. It asks the helper thread
 * (preload_helper.c) and waits at most SNAPPROF__CRASH_WAIT_NS of wall
 * time; a writer that blocks makes a shorter profile or none, never a hang.
 * Then it restores SIG_DFL and returns: a fault runs its instruction again
 * and faults again, now with the default action; a signal that was sent
 * (abort(), kill) is queued again with its original siginfo first, and
 * delivered as the handler returns. Either way the core shows the crash's
 * stack, not ours.
 *
 * Not covered: a stack overflow on a thread without an alternate signal
 * stack (the kernel has nowhere to run the handler and ends the process
 * itself; ours is SA_ONSTACK, so a thread with its own alternate stack is
 * covered). Giving threads one of ours could change what a program that
 * checks sigaltstack() before installing its own decides (Go adopts a
 * stack it finds), so we do not.
 *
 * A program handler installed with SA_RESETHAND is the one exception to
 * stepping aside: the kernel would reset it to SIG_DFL past us, so a
 * handler that then raises the signal again would end the process without
 * a profile. It runs under a trampoline of ours instead, which makes the
 * reset (to our SIG_DFL) and calls it with the kernel's flags. */
#include "preload/file_names.h"
#include "preload/preload_process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static const int g_crash_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define N_CRASH (sizeof g_crash_signals / sizeof g_crash_signals[0])

/* The program's disposition of one crash signal. 'busy' serialises the
 * changes of the view and of the real disposition, which go together; it
 * is only taken with every signal blocked, so no handler on the same thread
 * can meet it taken. */
typedef struct crash_sig {
    atomic_int owned;
    atomic_flag busy;
    struct sigaction view;
} crash_sig_t;

static crash_sig_t g_crash[N_CRASH];

/* How long a crashing thread waits for the writer: SNAPPROF__CRASH_WAIT_NS,
 * or, in a test build (-DSNAPPROF_TEST_SEAMS=ON) only,
 * SNAPPROF_TEST_CRASH_WAIT_MS (read at arm time): a test that checks a
 * profile is written must not depend on how much of a loaded machine the
 * writer gets within 2 s. A build to install never reads it, so a host's
 * environment cannot stretch a crash's wait. */
#define TEST_WAIT_ENV "SNAPPROF_TEST_CRASH_WAIT_MS"
static uint64_t g_wait_ns = SNAPPROF__CRASH_WAIT_NS;

/* Where the running profile's summary directory is kept (the argument of
 * snapprof__preload_crash_arm(), read when a crash comes), or NULL before
 * the first arm. */
static const char *g_summary_dir;

/* Async-signal-safe. */
static crash_sig_t *slot(int signo)
{
    for (size_t i = 0; i < N_CRASH; i++)
        if (g_crash_signals[i] == signo)
            return &g_crash[i];
    return NULL;
}

/* Async-signal-safe. */
static int is_handler(const struct sigaction *a)
{
    if (a->sa_flags & SA_SIGINFO)
        return a->sa_sigaction != NULL;
    return a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN;
}

/* Blocks every signal on this thread and takes c->busy. The spin is
 * bounded: a torn view is better than a hung program. Async-signal-safe. */
static void take(crash_sig_t *c, sigset_t *saved)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, saved);
    for (int spins = 0; atomic_flag_test_and_set(&c->busy) && spins < 10000000; spins++)
        ;
}

/* Async-signal-safe. */
static void give(crash_sig_t *c, const sigset_t *saved)
{
    int saved_errno = errno;
    atomic_flag_clear(&c->busy);
    pthread_sigmask(SIG_SETMASK, saved, NULL);
    errno = saved_errno;
}

/* ------------------------------------------------------------------------ */
/* The handler                                                              */
/* ------------------------------------------------------------------------ */

/* Appends s to buf[*n...], cut to size. Async-signal-safe. */
static void append(char *buf, size_t size, size_t *n, const char *s)
{
    while (*s && *n + 1 < size)
        buf[(*n)++] = *s++;
    buf[*n] = '\0';
}

/* Async-signal-safe. */
static void append_uint(char *buf, size_t size, size_t *n, unsigned long v)
{
    char digits[24];
    size_t k = sizeof digits;
    digits[--k] = '\0';
    do
        digits[--k] = (char)('0' + v % 10);
    while ((v /= 10) != 0 && k > 0);
    append(buf, size, n, &digits[k]);
}

/* Under `snapprof record`: "<summary_dir>/<pid>.crash", which tells the
 * command why a crashed process has no summary (the writer did not finish
 * in time, or the crash was inside the preload lock). Async-signal-safe. */
static void note_unwritten(int outcome)
{
    /* Fixed while the profile runs. */
    const char *dir = __atomic_load_n(&g_summary_dir, __ATOMIC_ACQUIRE);
    if (!dir || !dir[0])
        return;
    /* Not on the stack, which may be a small alternate one; the first
     * thread to crash writes the note. */
    static atomic_flag once = ATOMIC_FLAG_INIT;
    static char path[PATH_MAX];
    if (atomic_flag_test_and_set(&once))
        return;
    char text[64];
    size_t n = 0, t = 0;
    append(path, sizeof path, &n, dir);
    append(path, sizeof path, &n, "/");
    append_uint(path, sizeof path, &n, (unsigned long)getpid());
    append(path, sizeof path, &n, SNAPPROF__RECORD_CRASH_EXT); /* file_names.h */
    append(text, sizeof text, &t, "crash=");
    append(text, sizeof text, &t, outcome == SNAPPROF__FINISH_OWN_LOCK ? "own_lock" : "timeout");
    append(text, sizeof text, &t, "\nwait_ms=");
    append_uint(text, sizeof text, &t, (unsigned long)(g_wait_ns / 1000000u));
    append(text, sizeof text, &t, "\n");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    ssize_t w = write(fd, text, t);
    (void)w;
    close(fd);
}

/* Async-signal-safe. */
static void set_default(int signo)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    snapprof__preload_real_sigaction()(signo, &dfl, NULL);
}

/* Installed for real only while the program's disposition is SIG_DFL.
 * Async-signal-safe: it asks the helper thread and waits (bounded). */
static void on_crash(int signo, siginfo_t *info, void *uc)
{
    int saved_errno = errno;
    int outcome = snapprof__preload_finish_within(signo, g_wait_ns);
    if (outcome == SNAPPROF__FINISH_TIMED_OUT || outcome == SNAPPROF__FINISH_OWN_LOCK)
        note_unwritten(outcome);
    /* The default action, as if we had never been here. The program's
     * view stays SIG_DFL, which it is. */
    set_default(signo);
    errno = saved_errno;
    if (info && info->si_code > 0 && signo != SIGABRT)
        return; /* a fault: the instruction runs again and faults again */
    /* Sent (abort(), raise(), kill): again, with the sender's siginfo
     * where the kernel takes it back. It stays pending while this handler
     * runs and is delivered as it returns, where the first one came: the
     * core shows abort()'s stack, not ours. */
    pid_t pid = getpid(), tid = (pid_t)syscall(SYS_gettid);
    if (!info || syscall(SYS_rt_tgsigqueueinfo, pid, tid, signo, info) != 0)
        syscall(SYS_tgkill, pid, tid, signo);
    const ucontext_t *u = uc;
    if (!u || sigismember(&u->uc_sigmask, signo)) {
        /* Returning would leave it blocked: deliver it here. */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, signo);
        pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    }
    errno = saved_errno;
}

static void on_program_oneshot(int signo, siginfo_t *info, void *uc);

/* What the kernel should have for a disposition the program asked for:
 * its own handler or SIG_IGN as they are, SIG_DFL as ours. A handler with
 * SA_RESETHAND goes under on_program_oneshot, which does the reset itself,
 * so that the SIG_DFL it leaves is one we act on. Async-signal-safe. */
static int install(int signo, const struct sigaction *want)
{
    if ((is_handler(want) && !(want->sa_flags & SA_RESETHAND)) || want->sa_handler == SIG_IGN)
        return snapprof__preload_real_sigaction()(signo, want, NULL);
    struct sigaction k;
    memset(&k, 0, sizeof k);
    if (is_handler(want)) {
        k = *want;
        k.sa_flags = (want->sa_flags & ~SA_RESETHAND) | SA_SIGINFO;
        k.sa_sigaction = on_program_oneshot;
        return snapprof__preload_real_sigaction()(signo, &k, NULL);
    }
    k.sa_sigaction = on_crash;
    k.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&k.sa_mask);
    return snapprof__preload_real_sigaction()(signo, &k, NULL);
}

/* A program handler installed with SA_RESETHAND, as the kernel would run
 * it: the disposition becomes SIG_DFL (ours, so a handler that raises the
 * signal again still gets its profile written), then the handler runs,
 * under the mask and on the stack it asked for (its flags are the
 * kernel's). Async-signal-safe. */
static void on_program_oneshot(int signo, siginfo_t *info, void *uc)
{
    crash_sig_t *c = slot(signo);
    sigset_t saved;
    take(c, &saved);
    struct sigaction a = c->view;
    if (is_handler(&a) && (a.sa_flags & SA_RESETHAND)) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        if (install(signo, &dfl) == 0)
            c->view = dfl;
    }
    give(c, &saved);
    if (!is_handler(&a))
        return; /* changed meanwhile; a fault comes again */
    if (a.sa_flags & SA_SIGINFO)
        a.sa_sigaction(signo, info, uc);
    else
        a.sa_handler(signo);
}

/* ------------------------------------------------------------------------ */
/* Set-up and the program's view                                            */
/* ------------------------------------------------------------------------ */

void snapprof__preload_crash_arm(const char *summary_dir)
{
    __atomic_store_n(&g_summary_dir, summary_dir, __ATOMIC_RELEASE);
#if defined(SNAPPROF_SANITIZER_BUILD)
    return; /* ASan and TSan handle the fault signals themselves */
#else
#if defined(SNAPPROF_TEST_SEAMS)
    const char *wait_ms = getenv(TEST_WAIT_ENV);
    if (wait_ms && *wait_ms) {
        unsigned long long ms = strtoull(wait_ms, NULL, 10);
        if (ms > 0 && ms <= 600000)
            g_wait_ns = ms * 1000000u;
    }
#endif
    /* Found here, before any crash signal is ours, so that the handler's
     * calls only load it. */
    if (!snapprof__preload_real_sigaction())
        return;
    for (size_t i = 0; i < N_CRASH; i++) {
        crash_sig_t *c = &g_crash[i];
        int signo = g_crash_signals[i];
        sigset_t saved;
        take(c, &saved);
        struct sigaction cur;
        if (!atomic_load(&c->owned) && snapprof__preload_real_sigaction()(signo, NULL, &cur) == 0) {
            c->view = cur;
            if (is_handler(&cur) || cur.sa_handler == SIG_IGN || install(signo, &cur) == 0)
                atomic_store(&c->owned, 1);
        }
        give(c, &saved);
    }
#endif
}

int snapprof__preload_crash_owns(int signo)
{
    crash_sig_t *c = slot(signo);
    return c && atomic_load(&c->owned);
}

int snapprof__preload_crash_sigaction(int signo, const struct sigaction *act, struct sigaction *old)
{
    crash_sig_t *c = slot(signo);
    if (!c) {
        errno = EINVAL;
        return -1;
    }
    sigset_t saved;
    take(c, &saved);
    struct sigaction prev = c->view;
    int rc = 0;
    if (act) {
        rc = install(signo, act);
        if (rc == 0)
            c->view = *act;
    }
    give(c, &saved);
    if (rc != 0)
        return -1; /* errno from the real sigaction; give() keeps it */
    if (old)
        *old = prev;
    return 0;
}
