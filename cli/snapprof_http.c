/* `snapprof record --http`: Go's net/http/pprof paths served from the
 * record process with libmicrohttpd (its epoll mode; suspend/resume for
 * requests that last seconds). A CPU request (/profile, /wall under
 * --wall) becomes a line "cpu ID SECONDS" on the control socketpair (with
 * ?since=S under --flight, "since ID S", answered at once from the flight
 * recorder), a heap request (/heap, /allocs under --heap) a line "heap ID";
 * the program's preload (preload/preload_serve.c) answers "ok ID PATH" (a
 * pprof in our private directory, which we serve and unlink), "err ID
 * REASON" (503), or "end REASON" (its profile stopped). /allocs is /heap's
 * profile with alloc_space as its default sample type, set by
 * snapprof_http_allocs.c. The control thread that reads the answers,
 * resumes the waiting connections and cancels those whose client has gone
 * is snapprof_http_channel.c; the connections' header deadline is
 * snapprof_http_conns.c. */
#include "cli/snapprof_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifndef SNAPPROF_HAVE_MHD

int snapprof__http_check(const char *addr, char *why, size_t why_size)
{
    (void)addr;
    snprintf(why, why_size,
             "this snapprof was built without libmicrohttpd (install libmicrohttpd-dev and "
             "build again)");
    return -1;
}

int snapprof__http_check_token(const char *token, char *why, size_t why_size)
{
    (void)token;
    (void)why;
    (void)why_size;
    return 0;
}

snapprof__http_t *snapprof__http_prepare(const char *addr, const char *token, int heap, int wall)
{
    (void)addr;
    (void)token;
    (void)heap;
    (void)wall;
    return NULL;
}

void snapprof__http_set_flight(snapprof__http_t *h, int on)
{
    (void)h;
    (void)on;
}

void snapprof__http_start(snapprof__http_t *h, pid_t pid)
{
    (void)h;
    (void)pid;
}

void snapprof__http_finish(snapprof__http_t *h)
{
    (void)h;
}

#else

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <microhttpd.h>

#include "cli/snapprof_http_internal.h"
#include "common/duration.h"

#include <stdarg.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROFILE_PATH "/debug/pprof/profile"
#define WALL_PATH "/debug/pprof/wall"
#define HEAP_PATH "/debug/pprof/heap"
#define ALLOCS_PATH "/debug/pprof/allocs"
#define INDEX_PATH "/debug/pprof/"
#define CONNECTIONS_MAX 64
#define CONNECTION_TIMEOUT_S 10
/* The per-connection marker of a request not (or no longer) tied to a
 * slot. */
static int k_seen;

static int parse_addr(const char *s, struct sockaddr_storage *out, socklen_t *len, char *why,
                      size_t why_size)
{
    char host[INET6_ADDRSTRLEN + 1] = "127.0.0.1";
    const char *port;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':' || (size_t)(close - s - 1) >= sizeof host) {
            snprintf(why, why_size, "%s: an IPv6 address is written [ADDR]:PORT", s);
            return -1;
        }
        snprintf(host, sizeof host, "%.*s", (int)(close - s - 1), s + 1);
        port = close + 2;
    } else if (strchr(s, ':')) {
        const char *colon = strrchr(s, ':');
        if ((size_t)(colon - s) >= sizeof host) {
            snprintf(why, why_size, "%s: not an IPv4 address and port", s);
            return -1;
        }
        snprintf(host, sizeof host, "%.*s", (int)(colon - s), s);
        port = colon + 1;
    } else {
        port = s;
    }
    char *end;
    errno = 0;
    unsigned long p = strtoul(port, &end, 10);
    if (!*port || *end || errno || p > 65535 || port[0] == '-' || port[0] == '+') {
        snprintf(why, why_size, "%s: the port must be a number from 0 to 65535", s);
        return -1;
    }
    memset(out, 0, sizeof *out);
    struct sockaddr_in *v4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)p);
        *len = sizeof *v4;
    } else if (s[0] == '[' && inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)p);
        *len = sizeof *v6;
    } else {
        snprintf(why, why_size, "%s: not an IP address (IPv4 ADDR:PORT or [IPv6]:PORT)", s);
        return -1;
    }
    return 0;
}

int snapprof__http_check(const char *addr, char *why, size_t why_size)
{
    struct sockaddr_storage ss;
    socklen_t len;
    return parse_addr(addr, &ss, &len, why, why_size);
}

int snapprof__http_check_token(const char *token, char *why, size_t why_size)
{
    size_t n = strlen(token);
    if (n < SNAPPROF_HTTP_TOKEN_MIN || n > SNAPPROF_HTTP_TOKEN_MAX) {
        snprintf(why, why_size, "a token has %u to %u characters (this one %zu)",
                 SNAPPROF_HTTP_TOKEN_MIN, SNAPPROF_HTTP_TOKEN_MAX, n);
        return -1;
    }
    /* URL-safe as it is (RFC 3986's unreserved characters): it goes into
     * ?token= and an Authorization header without escaping. */
    for (const char *p = token; *p; p++) {
        char ch = *p;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.' || ch == '~')) {
            snprintf(why, why_size,
                     "a token has only letters, digits and - _ . ~ (this one has '%c' at %zu)",
                     ch >= 0x20 && ch < 0x7f ? ch : '?', (size_t)(p - token) + 1);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Answers                                                                  */
/* ------------------------------------------------------------------------ */

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *type,
                             const void *body, size_t len, enum MHD_ResponseMemoryMode mode,
                             unsigned retry_after)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, mode);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    /* One request per connection: nothing idles in a keep-alive, so the
     * end of the run finds no connection to wait for. */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    if (code == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    char ra[16];
    if (retry_after) {
        snprintf(ra, sizeof ra, "%u", retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

/* A one-line reason, as text. */
static enum MHD_Result say(struct MHD_Connection *c, unsigned code, unsigned retry_after,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result say(struct MHD_Connection *c, unsigned code, unsigned retry_after,
                           const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n > sizeof text - 2)
        n = (int)sizeof text - 2;
    text[n++] = '\n';
    text[n] = '\0';
    return reply(c, code, "text/plain; charset=utf-8", text, (size_t)n, MHD_RESPMEM_MUST_COPY,
                 retry_after);
}

/* Constant time in the token's length. */
static int token_matches(const char *want, const char *got)
{
    size_t n = strlen(want);
    if (!got || strlen(got) != n)
        return 0;
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(want[i] ^ got[i]);
    return diff == 0;
}

/* 0 when the request may go on; else it was answered 401. */
static int check_token(snapprof__http_t *h, struct MHD_Connection *c, enum MHD_Result *ret)
{
    if (!h->token[0])
        return 0;
    const char *q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token");
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (q) {
        if (token_matches(h->token, q))
            return 0;
        *ret = say(c, MHD_HTTP_UNAUTHORIZED, 0, "bad token: it is the one snapprof record printed");
        return -1;
    }
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0) {
        if (token_matches(h->token, auth + 7))
            return 0;
        *ret = say(c, MHD_HTTP_UNAUTHORIZED, 0,
                   "bad bearer token: it is the one snapprof record printed");
        return -1;
    }
    *ret = say(c, MHD_HTTP_UNAUTHORIZED, 0,
               "a token is required: ?token=T or Authorization: Bearer T (T as snapprof "
               "record printed)");
    return -1;
}

/* ?seconds=: 30 when absent, else a whole number within bounds. */
static int parse_seconds(const char *v, unsigned *out)
{
    if (!v) {
        *out = 30;
        return 0;
    }
    unsigned long n = 0;
    if (!*v || strlen(v) > 6)
        return -1;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        n = n * 10 + (unsigned long)(*p - '0');
    }
    if (n < 1 || n > SNAPPROF_HTTP_SECONDS_MAX)
        return -1;
    *out = (unsigned)n;
    return 0;
}

/* ?since=: a duration, 60, 60s, 5m or 1h (common/duration.h), 1 s to
 * 24 h, in whole seconds. */
static int parse_since(const char *v, unsigned *out)
{
    uint64_t secs;
    if (snapprof__parse_whole_duration(v, 1, 86400, &secs) != 0)
        return -1;
    *out = (unsigned)secs;
    return 0;
}

#define STR_(x) #x
#define STR(x) STR_(x)

/* The text of /debug/pprof/profile?seconds=N, for a kind of profile. */
#define SECONDS_TEXT(kind)                                                                         \
    "the " kind " profile (pprof) of the next N seconds:\n"                                        \
    "N from 1 to " STR(SNAPPROF_HTTP_SECONDS_MAX) ", default 30. go tool pprof URL opens it."

/* The endpoints the index page lists, in its order: XX(name, what is shown
 * as the path, its description (lines, each indented on the page), when it
 * is served). /debug/pprof/profile?seconds=N is listed once, for the kind
 * of profile this run takes. */
#define ENDPOINT_MAP(XX)                                                                           \
    XX(CPU, PROFILE_PATH "?seconds=N", SECONDS_TEXT("CPU"), SHOW_CPU)                              \
    XX(WALL_PROFILE, PROFILE_PATH "?seconds=N", SECONDS_TEXT("wall-time (--wall)"), SHOW_WALL)     \
    XX(WALL, WALL_PATH "?seconds=N",                                                               \
       "the same wall-time profile (every thread, blocked ones too)", SHOW_WALL)                   \
    XX(SINCE, PROFILE_PATH "?since=S",                                                             \
       "the CPU profile of the last S (60s, 5m, 1h), at once, from\n"                              \
       "the flight recorder (record --flight)",                                                    \
       SHOW_FLIGHT)                                                                                \
    XX(HEAP, HEAP_PATH,                                                                            \
       "the heap profile of the run so far, at once: alloc_objects,\n"                             \
       "alloc_space (since the start), inuse_objects, inuse_space (live\n"                         \
       "now); inuse_space by default",                                                             \
       SHOW_HEAP)                                                                                  \
    XX(ALLOCS, ALLOCS_PATH, "the same, alloc_space by default", SHOW_HEAP)                         \
    XX(INDEX, INDEX_PATH, "this page", SHOW_ALWAYS)

/* When an endpoint is served. */
typedef enum { SHOW_ALWAYS, SHOW_CPU, SHOW_WALL, SHOW_FLIGHT, SHOW_HEAP } show_t;

static const struct endpoint {
    const char *path;
    const char *text;
    show_t when;
} k_endpoints[] = {
#define XX(name, path, text, when) {path, text, when},
    ENDPOINT_MAP(XX)
#undef XX
};

static int served(const snapprof__http_t *h, show_t when)
{
    switch (when) {
    case SHOW_CPU:
        return !h->wall;
    case SHOW_WALL:
        return h->wall;
    case SHOW_FLIGHT:
        return h->flight;
    case SHOW_HEAP:
        return h->heap;
    case SHOW_ALWAYS:
        break;
    }
    return 1;
}

/* Lists what this run serves, and only that. */
static enum MHD_Result index_page(snapprof__http_t *h, struct MHD_Connection *c)
{
    char text[2048];
    int n = snprintf(text, sizeof text, "snapprof record: profiles of pid %d\n\n", (int)h->pid);
    for (size_t i = 0; i < sizeof k_endpoints / sizeof k_endpoints[0]; i++) {
        const struct endpoint *e = &k_endpoints[i];
        if (!served(h, e->when))
            continue;
        n += snprintf(text + n, sizeof text - (size_t)n, "%s\n", e->path);
        for (const char *l = e->text; *l;) {
            size_t len = strcspn(l, "\n");
            n += snprintf(text + n, sizeof text - (size_t)n, "    %.*s\n", (int)len, l);
            l += len + (l[len] == '\n');
        }
    }
    n += snprintf(text + n, sizeof text - (size_t)n,
                  "\nAt most %u profiles are taken at once (then 503 with Retry-After).\n",
                  SNAPPROF_HTTP_MAX_PROFILES);
    pthread_mutex_lock(&h->mu);
    unsigned long cancelled = h->cancelled;
    pthread_mutex_unlock(&h->mu);
    if (cancelled)
        n += snprintf(text + n, sizeof text - (size_t)n, "%lu request%s cancelled: client gone\n",
                      cancelled, cancelled == 1 ? "" : "s");
    pthread_mutex_lock(&h->conns.mu);
    unsigned long late = h->conns.closed_late;
    pthread_mutex_unlock(&h->conns.mu);
    if (late)
        n += snprintf(text + n, sizeof text - (size_t)n,
                      "%lu connection%s closed: headers not in within %u s\n", late,
                      late == 1 ? "" : "s", SNAPPROF_HTTP_HEADER_DEADLINE_S);
    return reply(c, MHD_HTTP_OK, "text/plain; charset=utf-8", text, (size_t)n,
                 MHD_RESPMEM_MUST_COPY, 0);
}

/* A resumed CPU request: its answer. */
static enum MHD_Result answer(snapprof__http_t *h, struct MHD_Connection *c, slot_t *s)
{
    pthread_mutex_lock(&h->mu);
    enum MHD_Result ret;
    if (s->c != c) {
        ret = MHD_NO; /* its client went: the slot is another's now; closed */
    } else if (s->state != SLOT_ANSWERED) {
        ret = MHD_NO; /* cannot be: resumed only once answered */
    } else if (s->code == MHD_HTTP_OK && s->allocs &&
               snapprof__http_set_alloc_space(&s->body, &s->len)) {
        ret = say(c, MHD_HTTP_INTERNAL_SERVER_ERROR, 0,
                  "cannot set alloc_space as the heap profile's default sample type");
    } else if (s->code == MHD_HTTP_OK) {
        /* A copy: the response's life is MHD's (the slot's body is freed
         * when the request completes). */
        ret = reply(c, MHD_HTTP_OK, "application/octet-stream", s->body, s->len,
                    MHD_RESPMEM_MUST_COPY, 0);
    } else {
        ret = say(c, s->code, 0, "%s", s->reason);
    }
    pthread_mutex_unlock(&h->mu);
    return ret;
}

/* A line to the program (the CPU profile of the next seconds, the last
 * seconds kept by the flight recorder, answered at once, or the heap
 * profile so far), and the connection waits (suspended) for the answer.
 * Every kind counts against one bound. */
static enum MHD_Result start_request(snapprof__http_t *h, struct MHD_Connection *c, kind_t kind,
                                     int allocs, unsigned seconds, void **req_cls)
{
    pthread_mutex_lock(&h->mu);
    if (h->ended || h->closed || !h->hello) {
        char why[256];
        snprintf(why, sizeof why, "%s",
                 h->ended    ? "the program has ended"
                 : h->closed ? h->closed_why
                             : "the program's profiler does not serve (yet): it has not "
                               "started, or the program does not load snapprof's preload");
        pthread_mutex_unlock(&h->mu);
        return say(c, MHD_HTTP_SERVICE_UNAVAILABLE, 0, "%s", why);
    }
    slot_t *s = NULL;
    uint64_t now = snapprof__http_now_ns(), soonest = UINT64_MAX;
    for (unsigned i = 0; i < SNAPPROF_HTTP_MAX_PROFILES; i++) {
        if (h->slots[i].state == SLOT_FREE && !s)
            s = &h->slots[i];
        else if (h->slots[i].state != SLOT_FREE && h->slots[i].end_ns < soonest)
            soonest = h->slots[i].end_ns;
    }
    if (!s) {
        unsigned retry = soonest > now ? (unsigned)((soonest - now) / 1000000000u) + 1 : 1;
        pthread_mutex_unlock(&h->mu);
        return say(c, MHD_HTTP_SERVICE_UNAVAILABLE, retry,
                   "%u profiles are being taken already: try again later",
                   SNAPPROF_HTTP_MAX_PROFILES);
    }
    char line[64];
    unsigned long id = ++h->next_id;
    int n = kind == KIND_HEAP ? snprintf(line, sizeof line, "heap %lu\n", id)
                              : snprintf(line, sizeof line, "%s %lu %u\n",
                                         kind == KIND_SINCE ? "since" : "cpu", id, seconds);
    ssize_t sent = send(h->ctl, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    /* EPIPE, ECONNRESET: the program's end is closed (it is ending, or it
     * closed the fd) and the reader is about to see it: the request waits
     * as any other, and is answered 503 with why when the reader closes the
     * channel (snapprof__http_close_channel(), under this lock, so not
     * before the slot is taken). Answered at once, it said "Broken pipe"
     * for a program that had ended (http_request_at_exit, 1 run in ~40
     * beside other tests). */
    int closing = sent < 0 && (errno == EPIPE || errno == ECONNRESET);
    if (sent != n && !closing) {
        pthread_mutex_unlock(&h->mu);
        return say(c, MHD_HTTP_SERVICE_UNAVAILABLE, 0, "cannot reach the program's profiler: %s",
                   strerror(errno));
    }
    /* Answers to since and heap come at once: their slots are held a few
     * seconds at most. */
    uint64_t wait_ns = kind == KIND_CPU ? seconds * 1000000000ull : 5000000000ull;
    *s = (slot_t){.state = SLOT_WAITING,
                  .kind = kind,
                  .allocs = allocs,
                  .id = id,
                  .c = c,
                  .end_ns = now + wait_ns};
    *req_cls = s;
    /* Under the lock: the answer, which resumes it, cannot come first. */
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&h->mu);
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    snapprof__http_t *h = cls;
    (void)version;
    (void)upload_data;
    if (*req_cls == NULL) {
        *req_cls = &k_seen; /* the headers: answered once the body is in */
        snapprof__http_conns_headers_in(&h->conns, c);
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0; /* a body is ignored */
        return MHD_YES;
    }
    if (*req_cls != &k_seen)
        return answer(h, c, *req_cls);
    int head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    if (!head && strcmp(method, MHD_HTTP_METHOD_GET) != 0)
        return say(c, MHD_HTTP_METHOD_NOT_ALLOWED, 0, "only GET and HEAD are served");
    int is_index = strcmp(url, INDEX_PATH) == 0 || strcmp(url, "/debug/pprof") == 0;
    int is_profile = strcmp(url, PROFILE_PATH) == 0;
    int is_wall = strcmp(url, WALL_PATH) == 0;
    int is_allocs = strcmp(url, ALLOCS_PATH) == 0;
    int is_heap = is_allocs || strcmp(url, HEAP_PATH) == 0;
    if (!is_index && !is_profile && !is_wall && !is_heap)
        return say(c, MHD_HTTP_NOT_FOUND, 0, "not served: %s (see %s)", url, INDEX_PATH);
    /* Known paths this run cannot serve: what to run instead. */
    if (is_heap && !h->heap)
        return say(c, MHD_HTTP_NOT_IMPLEMENTED, 0,
                   "%s: this run samples no allocations: run snapprof record with --heap", url);
    if (is_wall && !h->wall)
        return say(c, MHD_HTTP_NOT_IMPLEMENTED, 0,
                   "%s: this run samples CPU time only (a profile's mode is the run's): run "
                   "snapprof record with --wall",
                   url);
    enum MHD_Result ret;
    if (check_token(h, c, &ret) != 0)
        return ret;
    if (is_index)
        return index_page(h, c);
    const char *sv = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "seconds");
    if (is_heap) {
        /* Go's ?seconds= on /heap is a delta of two snapshots: not done. */
        if (sv)
            return say(c, MHD_HTTP_BAD_REQUEST, 0,
                       "seconds= on %s (a delta profile) is not served: ask for %s without it", url,
                       url);
        const char *gc = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "gc");
        if (gc && strcmp(gc, "0") != 0 && strcmp(gc, "1") != 0)
            return say(c, MHD_HTTP_BAD_REQUEST, 0,
                       "bad gc=%s: 0 or 1 (there is no collector to run)", gc);
        const char *debug = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "debug");
        if (debug && strcmp(debug, "0") != 0)
            return say(c, MHD_HTTP_BAD_REQUEST, 0, "bad debug=%s: only 0 (pprof) is served", debug);
        if (head) /* starts nothing */
            return reply(c, MHD_HTTP_OK, "application/octet-stream", "", 0, MHD_RESPMEM_PERSISTENT,
                         0);
        return start_request(h, c, KIND_HEAP, is_allocs, 1, req_cls);
    }
    unsigned seconds;
    const char *since = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "since");
    if (since) {
        if (!h->flight)
            return say(c, MHD_HTTP_BAD_REQUEST, 0,
                       "since= needs the flight recorder: snapprof record --flight DURATION");
        if (sv)
            return say(c, MHD_HTTP_BAD_REQUEST, 0, "seconds= or since=, not both");
        if (parse_since(since, &seconds) != 0)
            return say(c, MHD_HTTP_BAD_REQUEST, 0,
                       "bad since=%s: a duration from 1s to 24h (60, 60s, 5m, 1h)", since);
        if (head)
            return reply(c, MHD_HTTP_OK, "application/octet-stream", "", 0, MHD_RESPMEM_PERSISTENT,
                         0);
        return start_request(h, c, KIND_SINCE, 0, seconds, req_cls);
    }
    if (parse_seconds(sv, &seconds) != 0)
        return say(c, MHD_HTTP_BAD_REQUEST, 0, "bad seconds=%s: a whole number from 1 to %u", sv,
                   SNAPPROF_HTTP_SECONDS_MAX);
    if (head) /* starts nothing */
        return reply(c, MHD_HTTP_OK, "application/octet-stream", "", 0, MHD_RESPMEM_PERSISTENT, 0);
    return start_request(h, c, KIND_CPU, 0, seconds, req_cls);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    snapprof__http_t *h = cls;
    (void)toe;
    if (!*req_cls || *req_cls == &k_seen)
        return;
    slot_t *s = *req_cls;
    pthread_mutex_lock(&h->mu);
    if (s->c == c) { /* else freed when its client went, maybe taken again */
        free(s->body);
        *s = (slot_t){.state = SLOT_FREE};
    }
    pthread_mutex_unlock(&h->mu);
    *req_cls = NULL;
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                */
/* ------------------------------------------------------------------------ */

/* The private directory and what is left in it (answers that came for
 * requests already gone, unlinked as they came, or files of requests the
 * program never answered). */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            char path[PATH_MAX + 256];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

void snapprof__http_set_flight(snapprof__http_t *h, int on)
{
    if (h)
        h->flight = on;
}

snapprof__http_t *snapprof__http_prepare(const char *addr, const char *token, int heap, int wall)
{
    char why[256];
    snapprof__http_t *h = calloc(1, sizeof *h);
    if (!h || parse_addr(addr, &h->addr, &h->addr_len, why, sizeof why) != 0) {
        free(h);
        return NULL; /* checked with the options */
    }
    h->heap = heap;
    h->wall = wall;
    int random_token = token == NULL;
    h->listen_fd = h->ctl = h->child_end = -1;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->hello_cv, NULL);
    snapprof__http_conns_init(&h->conns);
    int fam = h->addr.ss_family, one = 1;
    int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (fam == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    }
    if (fd < 0 || bind(fd, (struct sockaddr *)&h->addr, h->addr_len) != 0 ||
        listen(fd, CONNECTIONS_MAX) != 0) {
        int e = errno;
        fprintf(stderr,
                "snapprof: --http %s: cannot listen: %s; the program runs without the "
                "endpoint\n",
                addr, strerror(e));
        if (fd >= 0)
            close(fd);
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->hello_cv);
        free(h);
        return NULL;
    }
    h->listen_fd = fd;
    struct sockaddr_storage got;
    socklen_t gl = sizeof got;
    getsockname(fd, (struct sockaddr *)&got, &gl);
    char ip[INET6_ADDRSTRLEN];
    if (fam == AF_INET6) {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&got)->sin6_addr, ip, sizeof ip);
        snprintf(h->host, sizeof h->host, "[%s]", ip);
        h->port = ntohs(((struct sockaddr_in6 *)&got)->sin6_port);
    } else {
        inet_ntop(AF_INET, &((struct sockaddr_in *)&got)->sin_addr, ip, sizeof ip);
        snprintf(h->host, sizeof h->host, "%s", ip);
        h->port = ntohs(((struct sockaddr_in *)&got)->sin_port);
    }

    /* The channel: ours close-on-exec; the program's end is inherited,
     * named by number and identity (the preload checks both). */
    int sv[2] = {-1, -1};
    const char *tmp = getenv("TMPDIR");
    snprintf(h->dir, sizeof h->dir, "%s/snapprof-http.XXXXXX", tmp && tmp[0] == '/' ? tmp : "/tmp");
    struct stat st;
    unsigned char raw[16];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || !mkdtemp(h->dir) ||
        fstat(sv[1], &st) != 0 || (random_token && getrandom(raw, sizeof raw, 0) != sizeof raw)) {
        fprintf(stderr,
                "snapprof: --http: cannot set up the control channel: %s; the program "
                "runs without the endpoint\n",
                strerror(errno));
        close(fd);
        if (sv[0] >= 0) {
            close(sv[0]);
            close(sv[1]);
        }
        rmdir(h->dir); /* made or not */
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->hello_cv);
        free(h);
        return NULL;
    }
    fcntl(sv[0], F_SETFD, FD_CLOEXEC);
    h->ctl = sv[0];
    h->child_end = sv[1];
    for (unsigned i = 0; random_token && i < sizeof raw; i++)
        snprintf(h->token + 2 * i, 3, "%02x", raw[i]);
    if (!random_token)
        snprintf(h->token, sizeof h->token, "%s", token); /* checked with the options */
    char v[96];
    snprintf(v, sizeof v, "%d:%llu:%llu", sv[1], (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    setenv("SNAPPROF_CONTROL_FD", v, 1);
    setenv("SNAPPROF_CONTROL_DIR", h->dir, 1);
    return h;
}

void snapprof__http_start(snapprof__http_t *h, pid_t pid)
{
    if (!h)
        return;
    h->pid = pid;
    close(h->child_end);
    h->child_end = -1;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
    if (h->addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET, h->listen_fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONNECTIONS_MAX, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)CONNECTION_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)16384,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_NOTIFY_CONNECTION,
        snapprof__http_conns_notify, &h->conns, MHD_OPTION_END);
    if (!h->d) {
        fprintf(stderr, "snapprof: --http: cannot start the server; the program runs without "
                        "the endpoint\n");
        return;
    }
    if (pthread_create(&h->reader, NULL, snapprof__http_reader_main, h) == 0) {
        h->reader_running = 1;
    } else {
        h->closed = 1;
        snprintf(h->closed_why, sizeof h->closed_why,
                 "snapprof record cannot read the program's answers");
    }
    /* The URL is printed once the program's preload serves (its
     * constructor runs after exec), so that a client that acts on the
     * line finds it ready; at most 5 s. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    pthread_mutex_lock(&h->mu);
    while (!h->hello && !h->closed)
        if (pthread_cond_timedwait(&h->hello_cv, &h->mu, &until) != 0)
            break;
    int hello = h->hello;
    pthread_mutex_unlock(&h->mu);
    if (!hello)
        fprintf(stderr, "snapprof: --http: the program's profiler does not serve yet; requests "
                        "are answered 503 until it does\n");
    fprintf(stderr, "snapprof: serving http://%s:%u%s?seconds=30%s%s\n", h->host, h->port,
            PROFILE_PATH, h->token[0] ? "&token=" : "", h->token);
    if (h->addr.ss_family == AF_INET &&
        ((struct sockaddr_in *)&h->addr)->sin_addr.s_addr != htonl(INADDR_LOOPBACK))
        fprintf(stderr,
                "snapprof: --http: %s is not the loopback address: whoever reaches it %s"
                "can take profiles\n",
                h->host, h->token[0] ? "with the token " : "");
}

void snapprof__http_finish(snapprof__http_t *h)
{
    if (!h)
        return;
    if (h->d) {
        /* The answers the program sent before it ended are read first:
         * its end closed the channel, unless a process it started holds
         * a copy (then what is still waiting is answered 503). */
        uint64_t give_up = snapprof__http_now_ns() + 2000000000u;
        while (h->reader_running && snapprof__http_now_ns() < give_up) {
            pthread_mutex_lock(&h->mu);
            int closed = h->closed;
            pthread_mutex_unlock(&h->mu);
            if (closed)
                break;
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
        }
        struct MHD_Connection *resume[SNAPPROF_HTTP_MAX_PROFILES];
        unsigned n = 0;
        pthread_mutex_lock(&h->mu);
        h->ended = 1;
        snapprof__http_close_channel(h, "the program has ended", resume, &n);
        pthread_mutex_unlock(&h->mu);
        for (unsigned i = 0; i < n; i++)
            MHD_resume_connection(resume[i]);
        /* Connections still queued in the kernel are answered (503 for a
         * profile), not reset by closing the listening socket under them:
         * MHD stops accepting, and we accept what is queued and hand it
         * over, until none is open and none came for two rounds; then the
         * socket is closed at once, so that a later client is refused
         * rather than queued and reset (at most 10 s). */
        int lfd = MHD_quiesce_daemon(h->d);
        uint64_t deadline = snapprof__http_now_ns() + 10000000000u;
        for (int quiet = 0; lfd >= 0 && snapprof__http_now_ns() < deadline;) {
            struct timespec ts = {0, 20000000};
            nanosleep(&ts, NULL);
            int took = 0;
            for (;;) {
                struct sockaddr_storage a;
                socklen_t al = sizeof a;
                int c = accept4(lfd, (struct sockaddr *)&a, &al, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (c < 0)
                    break;
                took = 1;
                (void)MHD_add_connection(h->d, c, (struct sockaddr *)&a,
                                         al); /* closes c on failure */
            }
            const union MHD_DaemonInfo *info =
                MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
            quiet = !took && (!info || info->num_connections == 0) ? quiet + 1 : 0;
            if (quiet == 2)
                break;
        }
        if (lfd >= 0)
            close(lfd);
        h->listen_fd = -1; /* MHD's no more: closed here */
        atomic_store(&h->quit, 1);
        if (h->reader_running)
            pthread_join(h->reader, NULL);
        MHD_stop_daemon(h->d);
    }
    if (h->listen_fd >= 0)
        close(h->listen_fd);
    if (h->ctl >= 0)
        close(h->ctl);
    if (h->child_end >= 0)
        close(h->child_end);
    remove_dir(h->dir);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->hello_cv);
    snapprof__http_conns_destroy(&h->conns);
    free(h);
}

#endif
