/* Profiles on request for `snapprof record --http` (cli/snapprof_http.c):
 * record, which serves HTTP, passes one end of a socketpair by number and
 * identity (SNAPPROF_CONTROL_FD="FD:DEV:INO") and a private directory
 * (SNAPPROF_CONTROL_DIR). A thread of ours, "snapprof-serve", which blocks
 * every signal and is never sampled, reads line requests "cpu ID SECONDS"
 * and, for each, attaches a pprof builder writing DIR/cpu-ID.pb.gz to the
 * running profile (snapprof_profiler_attach_builder(): the threads keep
 * their one trigger), detaches it SECONDS later, which writes it, and
 * answers "ok ID PATH" or "err ID REASON". "heap ID" asks for the run's
 * heap profile so far (SNAPPROF_HEAP), written at once to DIR/heap-ID.pb.gz
 * by the run's own heap builder without ending it. With a flight recorder
 * (SNAPPROF_FLIGHT: a flight builder attached for the whole run,
 * <snapprof/flight.h>), "since ID SECONDS" is answered at once with the
 * last SECONDS it kept, written to DIR/cpu-ID.pb.gz as the others.
 * "cancel ID" (its client went) drops request ID unanswered. At stop,
 * requests in flight are answered with what they collected so far, then
 * "end".
 * "hello" says the thread serves.
 *
 * The fd is the program's to close: before every use the thread checks
 * that the number still names our socket (fstat: the socket's device and
 * inode; F_GETFD: our close-on-exec flag). Once it does not, the thread
 * never touches that number again: record sees the socket's other end
 * closed and answers 503. The thread wakes at least once a second to
 * notice that while idle. Only the process record started serves (not
 * children, which have their own profiles). This file holds its own
 * state and never takes the preload lock (a stop calls it under it). */
#include "preload/preload_process.h"

#include <snapprof/flight.h>
#include <snapprof/heap.h>
#include <snapprof/snapprof.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Requests in flight at once; record holds back more (503). With the
 * rolling profiles' builders it stays within SNAPPROF_ATTACHED_MAX. */
#define SERVE_MAX 8

typedef struct request {
    unsigned long id;
    uint64_t end_ns; /* CLOCK_MONOTONIC */
    snapprof_builder_t *b;
    char path[PATH_MAX];
} request_t;

static struct {
    pthread_mutex_t mu; /* everything below; held while a builder is written */
    int on;             /* the thread runs and the fd was ours when last seen */
    int fd;
    dev_t dev;
    ino_t ino;
    char dir[PATH_MAX];
    snapprof_profiler_t *profiler;
    snapprof_builder_t *flight; /* attached to profiler while it serves; NULL: none */
    snapprof_builder_t *heap;   /* the run's heap builder, or NULL */
    request_t req[SERVE_MAX];
    char in[512];
    size_t in_len;
} S = {.mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

/* The fd still names our socket, with the close-on-exec flag we set: a
 * program that closed it and opened something else at that number owns
 * it now. */
static int fd_is_ours(void)
{
    struct stat st;
    int fl = fcntl(S.fd, F_GETFD);
    return fl >= 0 && (fl & FD_CLOEXEC) && fstat(S.fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
           st.st_dev == S.dev && st.st_ino == S.ino;
}

/* Sends one line; never blocks (record always reads) and never raises
 * SIGPIPE. Under S.mu. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[PATH_MAX + 128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n <= 0 || (size_t)n >= sizeof line || !S.on || !fd_is_ours())
        return;
    (void)send(S.fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Ends request r: detaching writes its file (what it collected so far
 * when the profile stops first). Under S.mu. */
static void finish(request_t *r)
{
    int rc = snapprof_profiler_detach_builder(S.profiler, r->b);
    snapprof_builder_destroy(r->b);
    r->b = NULL;
    if (rc == 0) {
        say("ok %lu %s\n", r->id, r->path);
    } else {
        unlink(r->path);
        say("err %lu cannot write the profile: %s\n", r->id, snapprof_strerror(rc));
    }
}

/* Detaches and frees the flight recorder, if any. Under S.mu. */
static void flight_end(void)
{
    if (!S.flight)
        return;
    (void)snapprof_profiler_detach_builder(S.profiler, S.flight);
    snapprof_builder_destroy(S.flight);
    S.flight = NULL;
}

/* Writes size bytes to a new file at path (0600, never an existing
 * one). Returns 0 or a negative errno. */
static int write_new(const char *path, const void *bytes, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int rc = 0;
    for (size_t off = 0; off < size && rc == 0;) {
        ssize_t n = write(fd, (const char *)bytes + off, size - off);
        if (n > 0)
            off += (size_t)n;
        else if (n < 0 && errno != EINTR)
            rc = -errno;
    }
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc != 0)
        unlink(path);
    return rc;
}

/* "since ID SECONDS": the flight recorder's last SECONDS, at once. Under
 * S.mu. */
static void since(unsigned long id, unsigned long seconds)
{
    if (!S.flight) {
        say("err %lu no flight recorder in this run (snapprof record --flight DURATION)\n", id);
        return;
    }
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/cpu-%lu.pb.gz", S.dir, id) >= (int)sizeof path) {
        say("err %lu path too long\n", id);
        return;
    }
    void *bytes = NULL;
    size_t size = 0;
    int rc =
        snapprof_flight_builder_collect(S.flight, (uint64_t)seconds * 1000000000u, &bytes, &size);
    if (rc == 0)
        rc = write_new(path, bytes, size);
    free(bytes);
    if (rc == 0)
        say("ok %lu %s\n", id, path);
    else
        say("err %lu cannot write the profile: %s\n", id, snapprof_strerror(rc));
}

/* The fd is not ours any more: requests in flight are dropped (record
 * answers them 503 when it sees the socket closed). Under S.mu. */
static void give_up(void)
{
    S.on = 0;
    flight_end();
    for (unsigned i = 0; i < SERVE_MAX; i++) {
        request_t *r = &S.req[i];
        if (!r->b)
            continue;
        (void)snapprof_profiler_drop_builder(S.profiler, r->b);
        snapprof_builder_destroy(r->b);
        r->b = NULL;
        unlink(r->path);
    }
    snapprof__preload_warn("the program closed the control channel of snapprof record --http "
                           "(fd %d): no more profiles are served in this run",
                           S.fd);
}

/* "heap ID": the run's heap profile so far, written at once by its own
 * heap builder to DIR/heap-ID.pb.gz (snapprof_profiler_write_builder():
 * the builder's own file, written at the end, is left as it was). Under
 * S.mu, which the stop takes before it stops the profile: no snapshot
 * runs while the profile completes. */
static void heap_request(unsigned long id)
{
    char path[PATH_MAX];
    if (!S.heap) {
        say("err %lu this run samples no allocations: run snapprof record with --heap\n", id);
        return;
    }
    if (snprintf(path, sizeof path, "%s/heap-%lu.pb.gz", S.dir, id) >= (int)sizeof path) {
        say("err %lu path too long\n", id);
        return;
    }
    int rc = snapprof_profiler_write_builder(S.profiler, S.heap, path);
    if (rc == 0) {
        say("ok %lu %s\n", id, path);
    } else {
        unlink(path);
        say("err %lu cannot write the heap profile: %s\n", id, snapprof_strerror(rc));
    }
}

/* "cancel ID": record's client for request ID has gone. Its builder is
 * dropped (snapprof_profiler_drop_builder(): no profile is made or
 * written) and freed, and nothing is answered. The unlink is for a file
 * written already, when the profile completed (stop) before the cancel
 * came. An ID not in flight (finished, answered
 * at once as since and heap are, or unknown) is ignored: its answer, if
 * one went, is dropped by record, which unlinks its file. Under S.mu, as
 * finish() and the stop are, so the two never both end it. */
static void cancel(unsigned long id)
{
    for (unsigned i = 0; i < SERVE_MAX; i++) {
        request_t *r = &S.req[i];
        if (!r->b || r->id != id)
            continue;
        (void)snapprof_profiler_drop_builder(S.profiler, r->b);
        snapprof_builder_destroy(r->b);
        r->b = NULL;
        unlink(r->path);
    }
}

/* One request line. Under S.mu. */
static void request(const char *line)
{
    unsigned long id, seconds;
    char extra;
    if (sscanf(line, "cancel %lu %c", &id, &extra) == 1) {
        cancel(id);
        return;
    }
    if (sscanf(line, "since %lu %lu %c", &id, &seconds, &extra) == 2 && seconds > 0 &&
        seconds <= 86400) {
        since(id, seconds);
        return;
    }
    if (sscanf(line, "heap %lu %c", &id, &extra) == 1) {
        heap_request(id);
        return;
    }
    if (sscanf(line, "cpu %lu %lu %c", &id, &seconds, &extra) != 2 || seconds == 0 ||
        seconds > 86400) {
        say("err 0 bad request\n");
        return;
    }
    request_t *r = NULL;
    for (unsigned i = 0; i < SERVE_MAX && !r; i++)
        if (!S.req[i].b)
            r = &S.req[i];
    if (!r) {
        say("err %lu %u profiles are being taken already\n", id, SERVE_MAX);
        return;
    }
    if (snprintf(r->path, sizeof r->path, "%s/cpu-%lu.pb.gz", S.dir, id) >= (int)sizeof r->path) {
        say("err %lu path too long\n", id);
        return;
    }
    int rc = snapprof_pprof_builder_create(r->path, &r->b);
    if (rc == 0 && (rc = snapprof_profiler_attach_builder(S.profiler, r->b)) != 0) {
        snapprof_builder_destroy(r->b);
        r->b = NULL;
    }
    if (rc != 0) {
        r->b = NULL;
        say("err %lu cannot start the profile: %s\n", id, snapprof_strerror(rc));
        return;
    }
    r->id = id;
    r->end_ns = snapprof__monotonic_ns() + (uint64_t)seconds * 1000000000u;
}

static void *serve_main(void *arg)
{
    (void)arg;
    prctl(PR_SET_NAME, "snapprof-serve");
    snapprof_heap_ignore_begin(); /* what it allocates is ours */
    for (;;) {
        pthread_mutex_lock(&S.mu);
        if (!S.on) {
            pthread_mutex_unlock(&S.mu);
            return NULL;
        }
        if (!fd_is_ours()) {
            give_up();
            pthread_mutex_unlock(&S.mu);
            return NULL;
        }
        uint64_t now = snapprof__monotonic_ns(), wait = 1000000000u;
        for (unsigned i = 0; i < SERVE_MAX; i++) {
            request_t *r = &S.req[i];
            if (r->b && r->end_ns <= now)
                finish(r);
            else if (r->b && r->end_ns - now < wait)
                wait = r->end_ns - now;
        }
        int fd = S.fd;
        pthread_mutex_unlock(&S.mu);

        /* The program may close fd while this waits: the next turn sees
         * it before using the number again. */
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int n = poll(&pfd, 1, (int)((wait + 999999u) / 1000000u));
        if (n <= 0)
            continue;
        pthread_mutex_lock(&S.mu);
        if (!S.on || !fd_is_ours()) {
            pthread_mutex_unlock(&S.mu);
            continue; /* the next turn ends it */
        }
        ssize_t got = recv(S.fd, S.in + S.in_len, sizeof S.in - 1 - S.in_len, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
            /* record is gone: nothing to answer. */
            S.on = 0;
            pthread_mutex_unlock(&S.mu);
            continue;
        }
        if (got > 0)
            S.in_len += (size_t)got;
        S.in[S.in_len] = '\0';
        char *nl;
        while ((nl = strchr(S.in, '\n')) != NULL) {
            *nl = '\0';
            request(S.in);
            S.in_len -= (size_t)(nl + 1 - S.in);
            memmove(S.in, nl + 1, S.in_len + 1);
        }
        if (S.in_len == sizeof S.in - 1)
            S.in_len = 0; /* no line is that long: record sends none */
        pthread_mutex_unlock(&S.mu);
    }
}

void snapprof__preload_serve_start(snapprof_profiler_t *p, snapprof_builder_t *heap,
                                   uint64_t flight_ns)
{
    const char *fdv = getenv("SNAPPROF_CONTROL_FD"), *dir = getenv("SNAPPROF_CONTROL_DIR");
    const char *root = getenv(SNAPPROF_ENV_ROOT_PID);
    if (!fdv || !dir || !root || atoi(root) != (int)getpid())
        return;
    int fd;
    unsigned long long dev, ino;
    if (sscanf(fdv, "%d:%llu:%llu", &fd, &dev, &ino) != 3 || fd < 0 || strlen(dir) >= sizeof S.dir)
        return;
    pthread_mutex_lock(&S.mu);
    if (S.on || S.fd >= 0) {
        /* Served once per process: a profile started again after a stop
         * is not served (record answers 503 since the first stop). */
        pthread_mutex_unlock(&S.mu);
        return;
    }
    S.fd = fd;
    S.dev = (dev_t)dev;
    S.ino = (ino_t)ino;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_dev != S.dev || st.st_ino != S.ino) {
        pthread_mutex_unlock(&S.mu);
        return; /* not the socket record made: not ours to touch */
    }
    /* Processes the program execs do not get it. */
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    snprintf(S.dir, sizeof S.dir, "%s", dir);
    S.profiler = p;
    S.heap = heap;
    S.on = 1;
    if (flight_ns) {
        /* Pieces of a thirtieth of the span, 1 to 10 s: what is kept
         * reaches back the span and at most a piece more. */
        uint64_t piece = flight_ns / 30;
        piece = piece < 1000000000u ? 1000000000u : piece > 10000000000u ? 10000000000u : piece;
        snapprof_flight_params_t fp = {.size = sizeof fp,
                                       .span_ns = flight_ns,
                                       .piece_ns = piece < flight_ns ? piece : flight_ns};
        int frc = snapprof_flight_builder_create(&fp, &S.flight);
        if (frc == 0 && (frc = snapprof_profiler_attach_builder(p, S.flight)) != 0) {
            snapprof_builder_destroy(S.flight);
            S.flight = NULL;
        }
        if (frc != 0)
            snapprof__preload_warn("--flight: cannot keep the last minutes (%s); "
                                   "?since= will not be served",
                                   snapprof_strerror(frc));
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* It symbolizes (libdw) and compresses, as the helper does. */
    pthread_attr_setstacksize(&attr, 2u << 20);
    pthread_t th;
    int rc = snapprof__preload_start_quiet_thread(&th, &attr, serve_main);
    pthread_attr_destroy(&attr);
    if (rc == 0) {
        say("hello\n"); /* record prints its URL once it is served */
    } else {
        say("end cannot start the thread that serves profiles: %s\n", strerror(rc));
        S.on = 0;
        flight_end();
        snapprof__preload_warn("--http: cannot start the thread that serves profiles (%s)",
                               strerror(rc));
    }
    pthread_mutex_unlock(&S.mu);
}

void snapprof__preload_serve_stop(void)
{
    pthread_mutex_lock(&S.mu);
    if (S.on && fd_is_ours()) {
        for (unsigned i = 0; i < SERVE_MAX; i++)
            if (S.req[i].b)
                finish(&S.req[i]);
        say("end the program's profile has stopped\n");
        flight_end();
    } else if (S.on) {
        give_up();
    }
    /* The thread ends at its next turn; it touches the profiler no more. */
    S.on = 0;
    S.profiler = NULL;
    S.heap = NULL;
    pthread_mutex_unlock(&S.mu);
}

void snapprof__preload_serve_fork_child(void)
{
    /* The parent's thread did not come along, and the socket is the
     * parent's: the child never reads or writes it. Its builders are the
     * parent's profiler's, never freed here. */
    pthread_mutex_init(&S.mu, NULL);
    S.on = 0;
    S.profiler = NULL;
    S.flight = NULL;
    S.heap = NULL;
    memset(S.req, 0, sizeof S.req);
}
