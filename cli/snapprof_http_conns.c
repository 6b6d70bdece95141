/* The header deadline of record --http's connections (see the header).
 * Each connection's socket is duplicated when libmicrohttpd accepts it,
 * so that the sweep's shutdown() acts on that socket even if
 * libmicrohttpd has closed its own fd meanwhile (whose number may then
 * be another file's): our duplicate is closed only when libmicrohttpd
 * says the connection is gone. shutdown() on a socket another thread
 * waits on is how a server ends a connection from outside its loop:
 * libmicrohttpd's next read sees the end and closes the connection as
 * for a client that left. */
#include "cli/snapprof_http_conns.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void snapprof__http_conns_init(snapprof__http_conns_t *t)
{
    pthread_mutex_init(&t->mu, NULL);
    for (unsigned i = 0; i < SNAPPROF_HTTP_CONNS_MAX; i++)
        t->e[i] = (snapprof__http_conn_t){.fd = -1};
    t->closed_late = 0;
    t->not_followed = 0;
}

void snapprof__http_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                                 enum MHD_ConnectionNotificationCode code)
{
    snapprof__http_conns_t *t = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        *socket_context = NULL;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        int fd = ci ? fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 3) : -1;
        pthread_mutex_lock(&t->mu);
        snapprof__http_conn_t *e = NULL;
        for (unsigned i = 0; fd >= 0 && i < SNAPPROF_HTTP_CONNS_MAX && !e; i++)
            if (t->e[i].fd < 0)
                e = &t->e[i];
        if (e) {
            *e = (snapprof__http_conn_t){.fd = fd, .since_ns = now_ns()};
            *socket_context = e;
        } else {
            t->not_followed++;
        }
        pthread_mutex_unlock(&t->mu);
        if (!e && fd >= 0)
            close(fd);
        return;
    }
    snapprof__http_conn_t *e = *socket_context;
    if (!e)
        return;
    pthread_mutex_lock(&t->mu);
    int fd = e->fd;
    e->fd = -1;
    pthread_mutex_unlock(&t->mu);
    *socket_context = NULL;
    close(fd);
}

static snapprof__http_conn_t *entry_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void snapprof__http_conns_headers_in(snapprof__http_conns_t *t, struct MHD_Connection *c)
{
    snapprof__http_conn_t *e = entry_of(c);
    if (!e)
        return;
    pthread_mutex_lock(&t->mu);
    e->headers_in = 1;
    pthread_mutex_unlock(&t->mu);
}

unsigned snapprof__http_conns_sweep(snapprof__http_conns_t *t, uint64_t now, uint64_t deadline_ns)
{
    unsigned n = 0;
    pthread_mutex_lock(&t->mu);
    for (unsigned i = 0; i < SNAPPROF_HTTP_CONNS_MAX; i++) {
        snapprof__http_conn_t *e = &t->e[i];
        if (e->fd < 0 || e->headers_in || e->shut || now - e->since_ns < deadline_ns)
            continue;
        shutdown(e->fd, SHUT_RDWR);
        /* Once: libmicrohttpd closes it at its next look. */
        e->shut = 1;
        n++;
    }
    t->closed_late += n;
    pthread_mutex_unlock(&t->mu);
    return n;
}

void snapprof__http_conns_destroy(snapprof__http_conns_t *t)
{
    for (unsigned i = 0; i < SNAPPROF_HTTP_CONNS_MAX; i++)
        if (t->e[i].fd >= 0) {
            close(t->e[i].fd);
            t->e[i].fd = -1;
        }
    pthread_mutex_destroy(&t->mu);
}
