/* `snapprof record --http ADDR:PORT`: the pprof endpoint, served by the
 * record process (libmicrohttpd in its epoll mode), never by the program.
 * Profiles come from the program's preload over a socketpair
 * (preload/preload_serve.c). Internal to cli/. */
#ifndef SNAPPROF_CLI_SNAPPROF_HTTP_H
#define SNAPPROF_CLI_SNAPPROF_HTTP_H

#include <stddef.h>
#include <sys/types.h>

typedef struct snapprof__http snapprof__http_t;

/* The most CPU profiles served at once; more get 503 with Retry-After. */
#define SNAPPROF_HTTP_MAX_PROFILES 8
/* Bounds of ?seconds= (default 30, as Go's net/http/pprof). */
#define SNAPPROF_HTTP_SECONDS_MAX 3600
/* Bounds of a token of the user's (--http-token TOKEN); the random one has
 * 32 hex digits. */
#define SNAPPROF_HTTP_TOKEN_MIN 16
#define SNAPPROF_HTTP_TOKEN_MAX 128

/* Checks --http's value (IPv4 literal:PORT, [IPv6 literal]:PORT, or PORT
 * alone for 127.0.0.1) and that this build can serve. Returns 0, or -1
 * with a one-line reason in why. */
int snapprof__http_check(const char *addr, char *why, size_t why_size);

/* Checks --http-token's value when it is not "none": 16 to 128 of
 * RFC 3986's unreserved characters (letters, digits, - _ . ~), so that it
 * goes into a URL and a header as it is. Returns 0, or -1 with a one-line
 * reason in why. */
int snapprof__http_check_token(const char *token, char *why, size_t why_size);

/* Before the program starts: listens on addr (a port in use is said on
 * stderr, and NULL is returned: the program runs without the endpoint),
 * makes the control channel and the private directory and sets the
 * environment the preload reads. token: NULL for a per-run random one,
 * "" for none, else the user's (checked). heap: the run samples
 * allocations (--heap), so /heap and /allocs are served; wall: the run's
 * profile is in wall mode (--wall), so /wall is served. Returns the
 * server, or NULL. */
snapprof__http_t *snapprof__http_prepare(const char *addr, const char *token, int heap, int wall);

/* With record --flight: the program keeps its last minutes, and
 * /debug/pprof/profile?since=S asks for its last S (else ?since= is 400).
 * Before snapprof__http_start(). h may be NULL. */
void snapprof__http_set_flight(snapprof__http_t *h, int on);

/* In record, once the program runs (pid): closes the program's end of the
 * channel, starts serving and prints the URL. h may be NULL. */
void snapprof__http_start(snapprof__http_t *h, pid_t pid);

/* After the program ended (reaped): answers what is in flight (with what
 * the program sent, else 503), answers connections still queued 503, then
 * stops serving and frees everything. h may be NULL. */
void snapprof__http_finish(snapprof__http_t *h);

#endif
