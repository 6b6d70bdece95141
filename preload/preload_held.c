/* Files held open for processes that drop their privileges (a server's
 * workers that setuid() to www-data) and can then no longer create files
 * where they were told to write.
 *
 * setuid, setgid and the rest of their family are interposed: when a
 * process whose profile runs is about to change its credentials while it
 * is root, it first opens each output path and, under `snapprof record`,
 * "<summary dir>/<pid>.held", while it still may. Only then: a process
 * that keeps its credentials never has a file at its path before the
 * profile is written (a program may remove the directory meanwhile, or
 * look at it). The fds are moved to the top of the fd range, where the
 * library keeps its own (common/fds.h: a handful more numbers there), and
 * each one's device and inode are kept: the program may close or dup2 over
 * any fd, so a number is written only after fstat() says it is still our
 * file. At stop the outputs are written as always (a new file renamed over
 * the path); only an output that could not be written there, and went to
 * a fallback directory, is copied into its held file (truncated first) and
 * the copy in the fallback directory removed; when the held fd was lost,
 * the output stays in the fallback directory and the summary says so. A
 * summary that cannot be written through its temporary file is written
 * into the held one, which `snapprof record` reads when there is no
 * "<pid>.summary". A held output file that this process created and that
 * nothing was written to is removed again (when the process still may).
 * Not seen: credentials changed by raw system calls (Go's
 * syscall.Setuid), which bypass libc.
 *
 * Also here, as the other fds of ours moved to the top: libunwind's pipe,
 * made at the profile's start (snapprof__preload_libunwind_init()) and
 * moved up by our pipe2. */
#include "preload/file_names.h"
#include "preload/preload.h"
#include "preload/preload_process.h"

#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <libunwind.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct held {
    int fd; /* -1: none */
    dev_t dev;
    ino_t ino;
    int created; /* this process made the file */
} held_t;

/* Under the preload lock. [SNAPPROF_OUTPUTS_MAX] is the summary. */
static held_t g_held[SNAPPROF_OUTPUTS_MAX + 1] = {
    [0 ... SNAPPROF_OUTPUTS_MAX] = {.fd = -1},
};
static pid_t g_held_pid; /* the process the fds were opened by */
/* Under the preload lock: the config of the profile this process runs,
 * as the control code says (snapprof__preload_held_running()), and the
 * process that started it; NULL when none. */
static const snapprof__preload_config_t *g_running;
static pid_t g_running_pid;

/* Whether h is still the file it was opened as. */
static int held_ok(const held_t *h)
{
    struct stat st;
    return h->fd >= 0 && fstat(h->fd, &st) == 0 && st.st_dev == h->dev && st.st_ino == h->ino;
}

/* Moves fd to the top of the fd range (the library's own range, common/
 * fds.h): the lowest free number at or above RLIMIT_NOFILE's soft limit
 * less 1/16 of it, as far as 65536. Returns the new number (fd closed), or
 * fd itself when there is no room up there. */
int snapprof__preload_fd_high(int fd)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return fd;
    rlim_t top = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 65536 ? 65536 : rl.rlim_cur;
    int floor = (int)(top - top / 16);
    if (fd >= floor)
        return fd;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (high < 0 || (rlim_t)high >= top) {
        if (high >= 0)
            close(high);
        return fd;
    }
    close(fd);
    return high;
}

/* 1 on the thread making libunwind's first call, for the moment of it. */
static __thread int t_libunwind_init __attribute__((tls_model("initial-exec")));

/* libunwind's first call that sets its target up (tdep_init: here
 * unw_set_caching_policy(), not unw_create_addr_space()) makes a
 * pipe, O_NONBLOCK | O_CLOEXEC, at the two lowest free fds, and keeps it
 * for ever: every fd the program opened afterwards was 2 higher than
 * without us (issue 24). The pipe serves libunwind's checks of addresses
 * in a *local* address space (write_validate, when mincore() is refused);
 * the CFI engine's is remote, every read its own. That call is made
 * here, before the profiler exists, with our pipe2() below moving the two
 * ends up to our numbers: libunwind keeps open, working fds, and the
 * program's numbers are its own. libunwind-x86_64.so (the remote,
 * generic library the engine uses) keeps the pipe; libunwind.so (local)
 * is never set up by us. A host linking libsnapprof without the preload
 * library keeps the pipe at low numbers (nothing sees the call). */
void snapprof__preload_libunwind_init(void)
{
    static unw_accessors_t none;
    t_libunwind_init = 1;
    unw_addr_space_t as = unw_create_addr_space(&none, 0);
    if (as) {
        /* The call that sets libunwind's target up (its pipe2), as the
         * engine's own (cfi_engine.c) would be. */
        unw_set_caching_policy(as, UNW_CACHE_GLOBAL);
        unw_destroy_addr_space(as);
    }
    t_libunwind_init = 0;
}

/* A pipe made during snapprof__preload_libunwind_init() on this thread has
 * its ends moved up; any other call is the program's and is passed
 * through. The system call itself, not the next pipe2: nothing to resolve
 * (dlsym takes the loader's lock and may allocate) in a signal handler or
 * a fork child, and glibc's pipe2 is that call and no more. */
SNAPPROF_PRELOAD_EXPORT int pipe2(int fds[2], int flags)
{
    long rc = syscall(SYS_pipe2, fds, flags);
    if (rc == 0 && t_libunwind_init) {
        int saved = errno;
        fds[0] = snapprof__preload_fd_high(fds[0]);
        fds[1] = snapprof__preload_fd_high(fds[1]);
        errno = saved;
    }
    return (int)rc;
}

static void hold(held_t *h, const char *path, int flags, mode_t mode)
{
    h->fd = -1;
    struct stat st;
    int existed = lstat(path, &st) == 0;
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | flags, mode);
    if (fd < 0)
        return;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return;
    }
    *h = (held_t){.fd = snapprof__preload_fd_high(fd),
                  .dev = st.st_dev,
                  .ino = st.st_ino,
                  .created = !existed};
}

/* Closes h if it is still ours (a number the program took over is left
 * alone). */
static void unhold(held_t *h)
{
    if (h->fd >= 0 && held_ok(h))
        close(h->fd);
    h->fd = -1;
}

static void summary_held_path(const snapprof__preload_config_t *cfg, char *out, size_t size)
{
    if (snapprof__preload_path_fmt(out, size, "%s/%d" SNAPPROF__RECORD_HELD_EXT, cfg->summary_dir,
                                   (int)getpid()) != 0)
        out[0] = '\0';
}

/* Under the preload lock, with this process's profile (config cfg)
 * running. */
static void hold_files(const snapprof__preload_config_t *cfg)
{
    snapprof__preload_release_files(cfg, 0);
    g_held_pid = getpid();
    for (unsigned i = 0; i < cfg->n_outputs; i++)
        hold(&g_held[i], cfg->outputs[i].path, O_CREAT, 0644);
    char path[PATH_MAX];
    summary_held_path(cfg, path, sizeof path);
    if (cfg->summary_dir[0] && path[0])
        hold(&g_held[SNAPPROF_OUTPUTS_MAX], path, O_CREAT | O_EXCL, 0600);
}

void snapprof__preload_release_files(const snapprof__preload_config_t *cfg, int remove_unused)
{
    if (g_held_pid != getpid()) {
        /* Inherited through fork(): the parent's files, not ours to write
         * or remove; only the numbers are given back. */
        for (unsigned i = 0; i <= SNAPPROF_OUTPUTS_MAX; i++)
            unhold(&g_held[i]);
        g_held_pid = 0;
        return;
    }
    for (unsigned i = 0; i <= SNAPPROF_OUTPUTS_MAX; i++) {
        held_t *h = &g_held[i];
        if (h->fd < 0)
            continue;
        struct stat fst, pst;
        char path[PATH_MAX];
        if (i == SNAPPROF_OUTPUTS_MAX)
            summary_held_path(cfg, path, sizeof path);
        else
            snprintf(path, sizeof path, "%s", cfg->outputs[i].path);
        /* Still our empty file at the path: nothing was written to it. */
        if (remove_unused && (h->created || i == SNAPPROF_OUTPUTS_MAX) && path[0] && held_ok(h) &&
            fstat(h->fd, &fst) == 0 && fst.st_size == 0 && lstat(path, &pst) == 0 &&
            pst.st_dev == h->dev && pst.st_ino == h->ino)
            unlink(path);
        unhold(h);
    }
    g_held_pid = 0;
}

/* Copies the file at from into h, from its start, and truncates it there.
 * Returns 0 or a negative errno. */
static int copy_into(held_t *h, const char *from)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -errno;
    int err = 0;
    off_t off = 0;
    char buf[16384];
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            err = n < 0 ? -errno : 0;
            break;
        }
        for (ssize_t done = 0; done < n;) {
            ssize_t w = pwrite(h->fd, buf + done, (size_t)(n - done), off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                err = w < 0 ? -errno : -EIO;
                break;
            }
            done += w;
            off += w;
        }
        if (err)
            break;
    }
    close(in);
    if (err == 0 && ftruncate(h->fd, off) != 0)
        err = -errno;
    if (err == 0 && fsync(h->fd) != 0)
        err = -errno;
    return err;
}

int snapprof__preload_held_output(const snapprof__preload_config_t *cfg, unsigned i,
                                  output_result_t *res)
{
    if (g_held_pid != getpid() || i >= SNAPPROF_OUTPUTS_MAX || !res->written[0] ||
        !held_ok(&g_held[i]))
        return -EBADF;
    int rc = copy_into(&g_held[i], res->written);
    if (rc != 0)
        return rc;
    unlink(res->written);
    snprintf(res->written, sizeof res->written, "%s", cfg->outputs[i].path);
    res->err = 0;
    return 0;
}

FILE *snapprof__preload_held_summary(void)
{
    held_t *h = &g_held[SNAPPROF_OUTPUTS_MAX];
    if (g_held_pid != getpid() || !held_ok(h))
        return NULL;
    int fd = fcntl(h->fd, F_DUPFD_CLOEXEC, h->fd);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "we");
    if (!f)
        close(fd);
    return f;
}

/* ------------------------------------------------------------------------ */
/* The credential calls                                                     */
/* ------------------------------------------------------------------------ */

void snapprof__preload_held_running(const snapprof__preload_config_t *cfg)
{
    g_running = cfg;
    g_running_pid = cfg ? getpid() : 0;
}

/* Before a call that may change this process's credentials: holds the
 * files if it is root and its profile runs (once). */
static void before_setid(void)
{
    if (geteuid() != 0 || atomic_load(&snapprof__preload_owner_pid) != (int)getpid())
        return;
    snapprof__preload_lock();
    /* Not a profile inherited through fork(): the parent's. */
    const snapprof__preload_config_t *cfg = g_running_pid == getpid() ? g_running : NULL;
    if (cfg && g_held_pid != getpid())
        hold_files(cfg);
    snapprof__preload_unlock();
}

/* int NAME(ARGS): holds the files, then calls libc's. */
#define SETID(name, params, args)                                                                  \
    SNAPPROF_PRELOAD_EXPORT int name params                                                        \
    {                                                                                              \
        static void *slot;                                                                         \
        int(*fn) params = (int(*) params)snapprof__preload_next_fn(&slot, #name);                  \
        if (!fn) {                                                                                 \
            errno = ENOSYS;                                                                        \
            return -1;                                                                             \
        }                                                                                          \
        before_setid();                                                                            \
        return fn args;                                                                            \
    }
SETID(setuid, (uid_t u), (u))
SETID(setgid, (gid_t g_), (g_))
SETID(seteuid, (uid_t u), (u))
SETID(setegid, (gid_t g_), (g_))
SETID(setreuid, (uid_t r, uid_t e), (r, e))
SETID(setregid, (gid_t r, gid_t e), (r, e))
SETID(setresuid, (uid_t r, uid_t e, uid_t s), (r, e, s))
SETID(setresgid, (gid_t r, gid_t e, gid_t s), (r, e, s))
SETID(setgroups, (size_t n, const gid_t *l), (n, l))
SETID(initgroups, (const char *user, gid_t g_), (user, g_))
