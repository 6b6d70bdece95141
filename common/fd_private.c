/* Work that opens a file for a moment, run on a thread of ours with an fd
 * table of its own (fd_private.h). */
#include "common/fd_private.h"

#include "common/fork_resets.h"
#include "common/own_thread.h"
#include "common/seccomp.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif

typedef enum { WORKER_NONE = 0, WORKER_STARTING, WORKER_READY, WORKER_FAILED } worker_state_t;

typedef struct request {
    snapprof__fd_private_fn fn;
    void *arg;
    int result;
    int done;
} request_t;

/* All under g_lock. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_posted = PTHREAD_COND_INITIALIZER;   /* to the worker: a request */
static pthread_cond_t g_answered = PTHREAD_COND_INITIALIZER; /* to callers: done, or free */
static worker_state_t g_state;
static pid_t g_pid;      /* the process the worker runs in */
static pid_t g_home;     /* this process, as the last fork() left it */
static request_t *g_req; /* the request being served, or NULL */
static int g_busy;       /* a caller's request is posted or being served */

static _Atomic int g_errno;
static _Atomic uint64_t g_inline;
static void (*_Atomic g_hook)(void);

static __thread int tls_is_worker;
/* Off by default (fd_private.h): the work runs on the caller. */
static _Atomic int g_enabled;

/* The fork() child has no worker (only the forking thread comes along);
 * g_lock may have been held by a thread that did not. Counted, as
 * fork_resets.h says, when it was. */
static void atfork_child(void)
{
    if (pthread_mutex_trylock(&g_lock) != 0) {
        pthread_mutex_init(&g_lock, NULL);
        snapprof__fork_reset_note(SNAPPROF__FORK_FD_PRIVATE);
    } else {
        pthread_mutex_unlock(&g_lock);
    }
    pthread_cond_init(&g_posted, NULL);
    pthread_cond_init(&g_answered, NULL);
    g_state = WORKER_NONE;
    g_req = NULL;
    g_busy = 0;
    g_pid = 0;
    g_home = getpid();
}

/* Before any call, and before any fork() of the program's. */
__attribute__((constructor)) static void fd_private_init(void)
{
    g_home = getpid();
    pthread_atfork(NULL, NULL, atfork_child);
}

/* Gives the calling thread an empty fd table of its own. Returns 0 or an
 * errno. */
static int unshare_table(void)
{
    if (!snapprof__seccomp_allowed(SNAPPROF__SECCOMP_CLOSE_RANGE))
        return EPERM;
    if (syscall(SYS_close_range, 0U, ~0U, CLOSE_RANGE_UNSHARE) != 0)
        return errno ? errno : EINVAL;
    return 0;
}

static void *worker_main(void *arg)
{
    (void)arg;
    tls_is_worker = 1;
    int err = unshare_table();
    void (*applied)(void) = NULL;
    pthread_mutex_lock(&g_lock);
    g_state = err ? WORKER_FAILED : WORKER_READY;
    if (err)
        atomic_store(&g_errno, err);
    pthread_cond_broadcast(&g_answered);
    while (!err) {
        while (!g_req)
            pthread_cond_wait(&g_posted, &g_lock);
        request_t *r = g_req;
        pthread_mutex_unlock(&g_lock);
        void (*hook)(void) = atomic_load(&g_hook);
        if (hook && hook != applied) {
            hook();
            applied = hook;
        }
        int result = r->fn(r->arg);
        pthread_mutex_lock(&g_lock);
        r->result = result;
        r->done = 1;
        g_req = NULL;
        pthread_cond_broadcast(&g_answered);
    }
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

/* Makes the worker and waits until it says whether it has its table.
 * g_lock held. */
static void start_worker(void)
{
    g_state = WORKER_STARTING;
    g_pid = getpid();
    int rc = snapprof__own_thread_start(worker_main, NULL, 256 * 1024, "snapprof-fds");
    if (rc != 0) {
        atomic_store(&g_errno, rc);
        g_state = WORKER_FAILED;
        return;
    }
    while (g_state == WORKER_STARTING)
        pthread_cond_wait(&g_answered, &g_lock);
}

int snapprof__fd_private_run(snapprof__fd_private_fn fn, void *arg)
{
    if (tls_is_worker || !atomic_load_explicit(&g_enabled, memory_order_relaxed))
        return fn(arg);
    /* A process made without fork() (vfork(), posix_spawn(), clone()):
     * the worker is not here, and no thread may be made. */
    pid_t pid = getpid();
    pthread_mutex_lock(&g_lock);
    /* Not before the process's seccomp filter was looked at: close_range
     * may be one it kills for (the look's own read runs here). */
    if (g_state == WORKER_NONE && pid == g_home && snapprof__seccomp_checked())
        start_worker();
    if (g_state != WORKER_READY || g_pid != pid) {
        int failed = g_state == WORKER_FAILED;
        pthread_mutex_unlock(&g_lock);
        if (failed)
            atomic_fetch_add(&g_inline, 1);
        return fn(arg);
    }
    while (g_busy)
        pthread_cond_wait(&g_answered, &g_lock);
    g_busy = 1;
    request_t r = {.fn = fn, .arg = arg};
    g_req = &r;
    pthread_cond_signal(&g_posted);
    while (!r.done)
        pthread_cond_wait(&g_answered, &g_lock);
    g_busy = 0;
    pthread_cond_broadcast(&g_answered);
    pthread_mutex_unlock(&g_lock);
    return r.result;
}

void snapprof__fd_private_set_enabled(int on)
{
    atomic_store(&g_enabled, on != 0);
}

void snapprof__fd_private_set_thread_hook(void (*hook)(void))
{
    atomic_store(&g_hook, hook);
}

int snapprof__fd_private_errno(void)
{
    return atomic_load(&g_errno);
}

uint64_t snapprof__fd_private_inline_calls(void)
{
    return atomic_load(&g_inline);
}
