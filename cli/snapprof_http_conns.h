/* The header deadline of record --http's connections: a client has
 * SNAPPROF_HTTP_HEADER_DEADLINE_S from its connection to the end of its
 * request's headers (each answer closes its connection: one request a
 * connection). libmicrohttpd 0.9.75 has only an idle timeout, which
 * a client that sends one byte every few seconds never reaches, so each
 * connection is followed here from libmicrohttpd's connection
 * notifications and the late ones are shut down by the control thread's
 * sweep. Internal to cli/. */
#ifndef SNAPPROF_CLI_SNAPPROF_HTTP_CONNS_H
#define SNAPPROF_CLI_SNAPPROF_HTTP_CONNS_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>

#define SNAPPROF_HTTP_HEADER_DEADLINE_S 20
/* At least libmicrohttpd's connection limit (a connection past it is not
 * followed, and counted). */
#define SNAPPROF_HTTP_CONNS_MAX 64

typedef struct snapprof__http_conn {
    int fd;            /* our duplicate of its socket, -1 when the entry is free */
    int headers_in;    /* its current request's headers are all in */
    int shut;          /* the sweep has shut it down (once: libmicrohttpd closes it) */
    uint64_t since_ns; /* when it was accepted */
} snapprof__http_conn_t;

typedef struct snapprof__http_conns {
    pthread_mutex_t mu;
    snapprof__http_conn_t e[SNAPPROF_HTTP_CONNS_MAX];
    unsigned long closed_late;  /* shut down: headers not in by the deadline */
    unsigned long not_followed; /* the table full, or no duplicate fd */
} snapprof__http_conns_t;

void snapprof__http_conns_init(snapprof__http_conns_t *t);

/* MHD_OPTION_NOTIFY_CONNECTION's callback; cls is the table. */
void snapprof__http_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                                 enum MHD_ConnectionNotificationCode code);

/* From the access handler's first call of a request: its headers are in. */
void snapprof__http_conns_headers_in(snapprof__http_conns_t *t, struct MHD_Connection *c);

/* Shuts down (both ways) each connection whose headers are not in
 * deadline_ns after its clock started; libmicrohttpd then reads the end
 * and closes it. Returns how many. */
unsigned snapprof__http_conns_sweep(snapprof__http_conns_t *t, uint64_t now_ns,
                                    uint64_t deadline_ns);

/* Closes the duplicates left (after the daemon stopped). */
void snapprof__http_conns_destroy(snapprof__http_conns_t *t);

#endif
