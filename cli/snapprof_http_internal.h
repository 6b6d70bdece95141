/* What the parts of record --http share (internal to cli/): the
 * server (snapprof_http.c: libmicrohttpd's callbacks, the pages and the
 * lifecycle), the control channel (snapprof_http_channel.c: the
 * program's answers, read on the control thread, and the waiting
 * connections it resumes) and /allocs' rewrite (snapprof_http_allocs.c).
 * One mutex, h->mu, guards the slots. */
#ifndef SNAPPROF_CLI_SNAPPROF_HTTP_INTERNAL_H
#define SNAPPROF_CLI_SNAPPROF_HTTP_INTERNAL_H

#include "cli/snapprof_http.h"
#include "cli/snapprof_http_conns.h"

#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

/* How often the waiting connections are looked at (while any waits). */
#define GONE_CHECK_NS 1000000000u

typedef enum { SLOT_FREE, SLOT_WAITING, SLOT_ANSWERED } slot_state_t;

/* What a request asks the program for: the file it answers with is
 * DIR/KIND-ID.pb.gz. */
typedef enum { KIND_CPU, KIND_HEAP, KIND_SINCE } kind_t;
/* A since answer is a CPU profile: cpu-ID too. */
extern const char *const snapprof__http_kind_names[3];

/* One request to the program, from the line sent to its connection's
 * end. */
typedef struct slot {
    slot_state_t state;
    kind_t kind;
    int allocs; /* /allocs: the default sample type becomes alloc_space */
    unsigned long id;
    uint64_t end_ns; /* when the profile should end (Retry-After) */
    /* The connection waiting for it. A slot freed while its connection
     * waits (client gone) is no longer its: the connection, resumed,
     * finds another c here (or NULL) and is closed without touching it. */
    struct MHD_Connection *c;
    unsigned code; /* once answered: 200 (body) or 503 (reason) */
    char *body;
    size_t len;
    char reason[256];
} slot_t;

struct snapprof__http {
    struct sockaddr_storage addr;
    socklen_t addr_len;
    int listen_fd;
    int ctl; /* our end of the control channel */
    int child_end;
    char dir[PATH_MAX];
    char token[SNAPPROF_HTTP_TOKEN_MAX + 1]; /* "" when none is required */
    int heap;                                /* --heap: /heap and /allocs are served */
    int wall;                                /* --wall: /wall is served */
    char host[INET6_ADDRSTRLEN + 2];
    unsigned port;
    pid_t pid;
    struct MHD_Daemon *d;
    pthread_t reader;
    int reader_running;
    atomic_int quit;

    pthread_mutex_t mu; /* everything below */
    slot_t slots[SNAPPROF_HTTP_MAX_PROFILES];
    unsigned long next_id;
    int closed; /* the channel says no more: closed_why */
    char closed_why[256];
    int ended; /* the program was reaped */
    int hello; /* the program's preload serves */
    pthread_cond_t hello_cv;
    int flight;                   /* record --flight: ?since= is served (set before start) */
    unsigned long cancelled;      /* requests whose client went before the answer */
    snapprof__http_conns_t conns; /* the header deadline (its own lock) */
};

static inline uint64_t snapprof__http_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Under h->mu: no more answers will come (why); every waiting request
 * is answered 503 and its connection added to resume (n of them). */
void snapprof__http_close_channel(snapprof__http_t *h, const char *why,
                                  struct MHD_Connection **resume, unsigned *n);

/* The control thread: reads the program's lines, resumes the connections
 * they answer, and once a second looks at the waiting connections (gone
 * clients) and the connections' header deadline. Until h->quit. */
void *snapprof__http_reader_main(void *arg);

/* snapprof_http_allocs.c, for /allocs: the gzipped pprof in body
 * (malloc'd) replaced by the same profile with alloc_space as its default
 * sample type. Returns 0, or -1 when it cannot be read (body unchanged). */
int snapprof__http_set_alloc_space(char **body, size_t *len);

#endif
