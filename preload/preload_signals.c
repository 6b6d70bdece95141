/* Signals the preload library shares with the program: sigaction() and
 * signal() interposed, so that snapprof's handlers stay installed while the
 * program sees, sets and gets called through its own dispositions.
 *
 * Two kinds of signal are managed:
 *   - the sampling signal: snapprof's stack copier sits on top and passes
 *     every signal that is not a sample request down to our dispatcher,
 *     which runs the program's disposition. A program that installs a
 *     handler for it later keeps receiving its own signals;
 *   - SIGINT, SIGTERM, SIGHUP: our dispatcher sits on top. While the
 *     program leaves one at SIG_DFL, its arrival first has the profile
 *     written, then ends the process by the default action as before; a
 *     program handler is simply called. SIG_IGN is set for real, so an
 *     ignored signal interrupts nothing.
 * Calls made by snapprof itself (its address range, or a thread inside a
 * passthrough section, counted in preload_process.c) see and change the
 * real dispositions. */
#include "preload/preload.h"
#include "preload/preload_process.h"

#include <snapprof/snapprof.h>

#include <errno.h>
#include <link.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The program's view of one managed signal. Readers (the dispatcher, in
 * signal context) copy the slot 'cur' names; writers fill the next slot and
 * then publish it, so a reader never sees a half-written action unless four
 * updates race past it. Writers are serialised by 'writing'. */
#define VIEW_SLOTS 4
typedef struct managed {
    atomic_int managed;
    atomic_uint cur;
    atomic_flag writing;
    int exit_signal; /* SIGINT/SIGTERM/SIGHUP: our dispatcher is on top */
    struct sigaction view[VIEW_SLOTS];
} managed_t;

static managed_t g_sig[NSIG];
static uintptr_t g_lib_lo, g_lib_hi; /* libsnapprof's code */
static atomic_int g_told_shared;

static int is_exit_signal(int signo)
{
    return signo == SIGINT || signo == SIGTERM || signo == SIGHUP;
}

/* ------------------------------------------------------------------------ */
/* Set-up                                                                   */
/* ------------------------------------------------------------------------ */

struct find_text {
    uintptr_t addr, lo, hi;
};

static int find_text_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    struct find_text *f = data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (f->addr >= lo && f->addr < hi) {
            f->lo = lo;
            f->hi = hi;
            return 1;
        }
    }
    return 0;
}

void snapprof__preload_signals_init(void)
{
    snapprof__preload_real_sigaction();
    /* Which code is snapprof's: its calls to sigaction() are not the
     * program's. */
    struct find_text f = {.addr = (uintptr_t)&snapprof_profiler_start};
    if (dl_iterate_phdr(find_text_cb, &f) == 1) {
        g_lib_lo = f.lo;
        g_lib_hi = f.hi;
    }
}

int snapprof__preload_is_snapprof_code(uintptr_t addr)
{
    return addr >= g_lib_lo && addr < g_lib_hi;
}

/* Async-signal-safe. */
static int from_snapprof(uintptr_t caller)
{
    return snapprof__preload_signals_passing_through() ||
           snapprof__preload_is_snapprof_code(caller);
}

static int is_handler(const struct sigaction *a)
{
    if (a->sa_flags & SA_SIGINFO)
        return a->sa_sigaction != NULL;
    return a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN;
}

static uintptr_t handler_address(const struct sigaction *a)
{
    return (a->sa_flags & SA_SIGINFO) ? (uintptr_t)a->sa_sigaction : (uintptr_t)a->sa_handler;
}

/* ------------------------------------------------------------------------ */
/* The program's view                                                       */
/* ------------------------------------------------------------------------ */

/* Async-signal-safe. */
static void view_read(managed_t *m, struct sigaction *out)
{
    unsigned i = atomic_load_explicit(&m->cur, memory_order_acquire) % VIEW_SLOTS;
    memcpy(out, &m->view[i], sizeof *out);
}

/* Async-signal-safe. A signal handler that interrupts a writer on the same
 * thread and changes the same signal would spin here; the spin is bounded
 * and then goes ahead, as a torn view is better than a hung program. */
static void view_write(managed_t *m, const struct sigaction *act)
{
    for (int spins = 0; atomic_flag_test_and_set(&m->writing) && spins < 1000000; spins++)
        ;
    unsigned next = (atomic_load_explicit(&m->cur, memory_order_relaxed) + 1) % VIEW_SLOTS;
    memcpy(&m->view[next], act, sizeof *act);
    atomic_store_explicit(&m->cur, next, memory_order_release);
    atomic_flag_clear(&m->writing);
}

/* ------------------------------------------------------------------------ */
/* The dispatcher                                                           */
/* ------------------------------------------------------------------------ */

/* Signals whose default action is to do nothing. */
static int default_ignores(int signo)
{
    return signo == SIGURG || signo == SIGWINCH || signo == SIGCHLD || signo == SIGCONT;
}

/* Lets the default action of signo happen now: the process ends.
 * Async-signal-safe. */
static void die_by_default(int signo)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    snapprof__preload_real_sigaction()(signo, &dfl, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, signo);
    syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), signo);
    /* Blocked while its own handler runs: unblocking delivers it. */
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

/* Runs the program's disposition for a signal that is not snapprof's.
 * Async-signal-safe as far as our part goes. */
static void dispatch(int signo, siginfo_t *info, void *uc)
{
    managed_t *m = &g_sig[signo];
    struct sigaction a;
    view_read(m, &a);
    if (is_handler(&a)) {
        if (!m->exit_signal) {
            /* The sampling signal: we run under the kernel's mask for our
             * own registration, so add what the program asked for. */
            pthread_sigmask(SIG_BLOCK, &a.sa_mask, NULL);
            if (a.sa_flags & SA_NODEFER) {
                sigset_t self;
                sigemptyset(&self);
                sigaddset(&self, signo);
                pthread_sigmask(SIG_UNBLOCK, &self, NULL);
            }
        }
        if (a.sa_flags & SA_RESETHAND) {
            struct sigaction dfl;
            memset(&dfl, 0, sizeof dfl);
            dfl.sa_handler = SIG_DFL;
            view_write(m, &dfl);
        }
        if (a.sa_flags & SA_SIGINFO)
            a.sa_sigaction(signo, info, uc);
        else
            a.sa_handler(signo);
        return;
    }
    if (a.sa_handler == SIG_IGN || default_ignores(signo))
        return;
    int saved_errno = errno;
    /* The default action ends the process, before any exit handler could
     * write the profile: write it first. */
    snapprof__preload_finish_on_signal(signo);
    die_by_default(signo);
    errno = saved_errno;
}

/* Puts what the kernel should have for an exit signal in place: SIG_IGN
 * for real when the program ignores it, else our dispatcher with the
 * program's flags and mask (SA_RESTART or not changes what the program's
 * blocking calls see). */
static int install_exit_signal(int signo, const struct sigaction *view)
{
    struct sigaction k;
    memset(&k, 0, sizeof k);
    if (!is_handler(view) && view->sa_handler == SIG_IGN) {
        k.sa_handler = SIG_IGN;
    } else {
        k.sa_sigaction = dispatch;
        if (is_handler(view)) {
            k.sa_mask = view->sa_mask;
            k.sa_flags = view->sa_flags & (SA_RESTART | SA_NODEFER);
        } else {
            sigemptyset(&k.sa_mask);
            k.sa_flags = SA_RESTART;
        }
        /* Always on the alternate stack where the thread has one: with
         * SIG_DFL the dispatcher writes the profile, which a goroutine's
         * small stack would not hold (and Go aborts on a handler without
         * the flag). */
        k.sa_flags |= SA_SIGINFO | SA_ONSTACK;
    }
    return snapprof__preload_real_sigaction()(signo, &k, NULL);
}

int snapprof__preload_signals_manage(int signo, int adopt_handler)
{
    if (signo <= 0 || signo >= NSIG)
        return -EINVAL;
    managed_t *m = &g_sig[signo];
    if (atomic_load(&m->managed))
        return 0;
    struct sigaction cur;
    if (snapprof__preload_real_sigaction()(signo, NULL, &cur) != 0)
        return -errno;
    uintptr_t h = handler_address(&cur);
    if (is_handler(&cur) && h >= g_lib_lo && h < g_lib_hi)
        return 0; /* snapprof's handler is there already (the host uses it) */
    if (is_handler(&cur) && !adopt_handler)
        return -EBUSY;
    m->exit_signal = is_exit_signal(signo);
    memset(m->view, 0, sizeof m->view);
    m->view[0] = cur;
    atomic_store(&m->cur, 0);
    int rc;
    if (m->exit_signal) {
        rc = install_exit_signal(signo, &cur);
    } else {
        /* Under snapprof's own handler, which is installed next. */
        struct sigaction k;
        memset(&k, 0, sizeof k);
        k.sa_sigaction = dispatch;
        k.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
        sigemptyset(&k.sa_mask);
        rc = snapprof__preload_real_sigaction()(signo, &k, NULL);
    }
    if (rc != 0)
        return -errno;
    atomic_store(&m->managed, 1);
    return 0;
}

int snapprof__preload_signals_is_managed(int signo)
{
    return signo > 0 && signo < NSIG && atomic_load(&g_sig[signo].managed);
}

int snapprof__preload_signals_has_program_handler(int signo)
{
    if (signo <= 0 || signo >= NSIG)
        return 0;
    struct sigaction cur;
    if (atomic_load(&g_sig[signo].managed)) {
        view_read(&g_sig[signo], &cur);
        return is_handler(&cur);
    }
    if (snapprof__preload_real_sigaction()(signo, NULL, &cur) != 0 || !is_handler(&cur))
        return 0;
    uintptr_t h = handler_address(&cur);
    return !(h >= g_lib_lo && h < g_lib_hi);
}

/* ------------------------------------------------------------------------ */
/* Interposed                                                               */
/* ------------------------------------------------------------------------ */

/* Async-signal-safe, like the sigaction it stands for. */
static int program_sigaction(int signo, const struct sigaction *act, struct sigaction *old,
                             uintptr_t caller)
{
    if (snapprof__preload_crash_owns(signo) && !from_snapprof(caller))
        return snapprof__preload_crash_sigaction(signo, act, old); /* preload_crash.c */
    if (signo <= 0 || signo >= NSIG || !atomic_load(&g_sig[signo].managed) || from_snapprof(caller))
        return snapprof__preload_real_sigaction()(signo, act, old);
    managed_t *m = &g_sig[signo];
    struct sigaction prev;
    view_read(m, &prev);
    if (act) {
        if (m->exit_signal && install_exit_signal(signo, act) != 0)
            return -1;
        view_write(m, act);
        if (!m->exit_signal && is_handler(act) && !atomic_exchange(&g_told_shared, 1)) {
            char name[32];
            snapprof__preload_warn("the program installed a handler for %s, which snapprof "
                                   "samples with; both work (signals not snapprof's are passed "
                                   "on), or choose another with SNAPPROF_SIGNAL",
                                   snapprof__signal_name(signo, name, sizeof name));
        }
    }
    if (old)
        *old = prev;
    return 0;
}

SNAPPROF_PRELOAD_EXPORT int sigaction(int signo, const struct sigaction *act, struct sigaction *old)
{
    return program_sigaction(signo, act, old, (uintptr_t)__builtin_return_address(0));
}

/* glibc's signal() goes to its internal sigaction directly, past the one
 * above, so it is interposed too; BSD semantics, as glibc's. */
SNAPPROF_PRELOAD_EXPORT sighandler_t signal(int signo, sighandler_t handler)
{
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    act.sa_flags = SA_RESTART;
    sigemptyset(&act.sa_mask);
    if (signo > 0 && signo < NSIG)
        sigaddset(&act.sa_mask, signo);
    if (program_sigaction(signo, &act, &old, (uintptr_t)__builtin_return_address(0)) != 0)
        return SIG_ERR;
    return old.sa_handler;
}
