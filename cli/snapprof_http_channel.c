/* The control channel of record --http: the program's preload answers
 * each request on a socketpair ("ok ID PATH", "err ID REASON", "hello",
 * "end REASON"); the control thread here reads those lines, takes the
 * answer's file from the private directory and resumes the connection
 * that waits for it. It also watches the waiting connections, which
 * libmicrohttpd does not while they are suspended (a client that has
 * gone is cancelled: "cancel ID" to the program), and sweeps the
 * connections whose request headers are late (snapprof_http_conns.c).
 * The channel closed without "end" means the program ended or closed our
 * fd: every waiting request is then 503 with that reason. */
#include "cli/snapprof_http_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A since answer is a CPU profile: cpu-ID too. */
const char *const snapprof__http_kind_names[3] = {
    [KIND_CPU] = "cpu", [KIND_HEAP] = "heap", [KIND_SINCE] = "cpu"};

static slot_t *slot_of(snapprof__http_t *h, unsigned long id)
{
    for (unsigned i = 0; i < SNAPPROF_HTTP_MAX_PROFILES; i++)
        if (h->slots[i].state == SLOT_WAITING && h->slots[i].id == id)
            return &h->slots[i];
    return NULL;
}

/* Under h->mu: s answered 503; its connection is added to resume. */
static void fail_slot(slot_t *s, const char *why, struct MHD_Connection **resume, unsigned *n)
{
    s->state = SLOT_ANSWERED;
    s->code = MHD_HTTP_SERVICE_UNAVAILABLE;
    snprintf(s->reason, sizeof s->reason, "%s", why);
    resume[(*n)++] = s->c;
}

void snapprof__http_close_channel(snapprof__http_t *h, const char *why,
                                  struct MHD_Connection **resume, unsigned *n)
{
    if (!h->closed) {
        h->closed = 1;
        snprintf(h->closed_why, sizeof h->closed_why, "%s", why);
        pthread_cond_broadcast(&h->hello_cv);
    }
    for (unsigned i = 0; i < SNAPPROF_HTTP_MAX_PROFILES; i++)
        if (h->slots[i].state == SLOT_WAITING)
            fail_slot(&h->slots[i], h->closed_why, resume, n);
}

/* The file the program wrote for request id, read and unlinked. */
static int take_file(snapprof__http_t *h, unsigned long id, const char *path, slot_t *s)
{
    char want[PATH_MAX + 32];
    snprintf(want, sizeof want, "%s/%s-%lu.pb.gz", h->dir, snapprof__http_kind_names[s->kind], id);
    if (strcmp(path, want) != 0) {
        snprintf(s->reason, sizeof s->reason, "the program answered with an unexpected file");
        return -1;
    }
    int fd = open(want, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    unlink(want);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 30)) {
        snprintf(s->reason, sizeof s->reason, "cannot read the profile the program wrote: %s",
                 fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf || got != (size_t)st.st_size) {
        free(buf);
        snprintf(s->reason, sizeof s->reason, "cannot read the profile the program wrote");
        return -1;
    }
    s->body = buf;
    s->len = got;
    return 0;
}

/* One line from the program. Under h->mu. */
static void on_line(snapprof__http_t *h, char *line, struct MHD_Connection **resume, unsigned *n)
{
    unsigned long id = 0;
    int off = 0;
    if (strcmp(line, "hello") == 0) {
        h->hello = 1;
        pthread_cond_broadcast(&h->hello_cv);
        return;
    }
    if (strncmp(line, "end ", 4) == 0) {
        snapprof__http_close_channel(h, line + 4, resume, n);
        return;
    }
    int ok = sscanf(line, "ok %lu %n", &id, &off) == 1 && off > 0;
    int err = !ok && sscanf(line, "err %lu %n", &id, &off) == 1 && off > 0;
    if (!ok && !err)
        return;
    slot_t *s = slot_of(h, id);
    if (!s) {
        if (ok) { /* its client is gone: the file is not served */
            for (unsigned k = 0;
                 k < sizeof snapprof__http_kind_names / sizeof snapprof__http_kind_names[0]; k++) {
                char want[PATH_MAX + 32];
                snprintf(want, sizeof want, "%s/%s-%lu.pb.gz", h->dir, snapprof__http_kind_names[k],
                         id);
                unlink(want);
            }
        }
        return;
    }
    if (ok && take_file(h, id, line + off, s) == 0) {
        s->state = SLOT_ANSWERED;
        s->code = MHD_HTTP_OK;
        resume[(*n)++] = s->c;
        return;
    }
    char why[256];
    if (err)
        snprintf(why, sizeof why, "the program could not take the profile: %s", line + off);
    else
        snprintf(why, sizeof why, "%s", s->reason);
    fail_slot(s, why, resume, n);
}

/* Under h->mu: a waiting connection whose client has gone is cancelled.
 * Suspended, the connection is ours to look at: libmicrohttpd neither
 * reads nor closes it until it is resumed, so its fd is its own. Gone is
 * what Go's server counts as gone (its request's context is cancelled):
 * the client closed or shut down its side (POLLRDHUP), or the connection
 * was reset (POLLHUP, POLLERR). The program is told ("cancel ID"; an
 * answer already on its way finds no slot, and on_line unlinks its file),
 * the slot is free for the next request at once, and the connection is
 * resumed so that libmicrohttpd closes it (answer() finds the slot is not
 * its). */
static void check_gone(snapprof__http_t *h, struct MHD_Connection **resume, unsigned *n)
{
    for (unsigned i = 0; i < SNAPPROF_HTTP_MAX_PROFILES; i++) {
        slot_t *s = &h->slots[i];
        if (s->state != SLOT_WAITING)
            continue;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(s->c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci)
            continue;
        struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLRDHUP};
        if (poll(&pfd, 1, 0) != 1 || !(pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)))
            continue;
        char line[64];
        int len = snprintf(line, sizeof line, "cancel %lu\n", s->id);
        /* Not sent (the channel full or closed): the program finishes the
         * request in its time, and its answer is dropped all the same. */
        (void)send(h->ctl, line, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
        resume[(*n)++] = s->c;
        *s = (slot_t){.state = SLOT_FREE};
        h->cancelled++;
    }
}

/* Why the channel closed without "end": the program ended, or it closed
 * our fd (or exec'd another program, which does not inherit it). A
 * process that ends closes its files before it is a zombie: wait a
 * little for that. */
static void closed_reason(snapprof__http_t *h, char *why, size_t size)
{
    int fd =
        (int)strtol(getenv("SNAPPROF_CONTROL_FD") ? getenv("SNAPPROF_CONTROL_FD") : "-1", NULL, 10);
    for (int i = 0; i < 50; i++) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)h->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 ||
            si.si_pid == h->pid) {
            snprintf(why, size, "the program has ended");
            return;
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    snprintf(why, size,
             "the program closed snapprof's control channel (its fd %d) or exec'd another "
             "program: no more profiles can be taken in this run; the program runs on",
             fd);
}

void *snapprof__http_reader_main(void *arg)
{
    snapprof__http_t *h = arg;
    char buf[PATH_MAX + 512];
    size_t len = 0;
    uint64_t next_check = 0; /* when the waiting connections are looked at */
    while (!atomic_load(&h->quit)) {
        struct MHD_Connection *resume[SNAPPROF_HTTP_MAX_PROFILES];
        unsigned n = 0;
        struct pollfd pfd = {.fd = h->ctl, .events = POLLIN};
        int ready = poll(&pfd, 1, 100);
        /* The waiting connections, once a second, on a wakeup the poll
         * above has anyway: nothing more wakes while none waits. */
        uint64_t now = snapprof__http_now_ns();
        if (now >= next_check) {
            next_check = now + GONE_CHECK_NS;
            pthread_mutex_lock(&h->mu);
            check_gone(h, resume, &n);
            pthread_mutex_unlock(&h->mu);
            snapprof__http_conns_sweep(&h->conns, now,
                                       SNAPPROF_HTTP_HEADER_DEADLINE_S * 1000000000ull);
            for (unsigned i = 0; i < n; i++)
                MHD_resume_connection(resume[i]);
            n = 0;
        }
        if (ready <= 0)
            continue;
        ssize_t got = recv(h->ctl, buf + len, sizeof buf - 1 - len, MSG_DONTWAIT);
        if (got < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (got <= 0) {
            char why[256];
            closed_reason(h, why, sizeof why);
            pthread_mutex_lock(&h->mu);
            snapprof__http_close_channel(h, why, resume, &n);
            pthread_mutex_unlock(&h->mu);
            for (unsigned i = 0; i < n; i++)
                MHD_resume_connection(resume[i]);
            break;
        }
        len += (size_t)got;
        buf[len] = '\0';
        pthread_mutex_lock(&h->mu);
        char *nl;
        while ((nl = strchr(buf, '\n')) != NULL) {
            *nl = '\0';
            on_line(h, buf, resume, &n);
            len -= (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, len + 1);
        }
        if (len == sizeof buf - 1)
            len = 0; /* no line is that long */
        pthread_mutex_unlock(&h->mu);
        for (unsigned i = 0; i < n; i++)
            MHD_resume_connection(resume[i]);
    }
    return NULL;
}
