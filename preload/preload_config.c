/* Parsing and checking of whole-process profile settings (see
 * preload_config.h); shared by the preload library and the command. */
#include "preload/preload_config.h"
#include "common/duration.h"
#include "preload/file_names.h"
#include "sampling_thread/profiler_defaults.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define WHY(...) snprintf(why, why_size, __VA_ARGS__)

int snapprof__parse_hz(const char *s, unsigned *out, char *why, size_t why_size)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || s == end || *end != '\0' || errno != 0) {
        WHY("'%s' is not a whole number of samples per second", s ? s : "");
        return -1;
    }
    if (v < (long)SNAPPROF_HZ_MIN || v > (long)SNAPPROF_HZ_MAX) {
        WHY("%ld Hz is out of range (%u-%u Hz)", v, SNAPPROF_HZ_MIN, SNAPPROF_HZ_MAX);
        return -1;
    }
    *out = (unsigned)v;
    return 0;
}

int snapprof__parse_duration(const char *s, uint64_t *out_ns, char *why, size_t why_size)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || s == end || *end != '\0' || errno != 0 || isnan(v)) {
        WHY("'%s' is not a number of seconds", s ? s : "");
        return -1;
    }
    if (!(v > 0) || v > SNAPPROF_DURATION_MAX_S) {
        WHY("%s seconds is out of range (more than 0, at most %.0f)", s, SNAPPROF_DURATION_MAX_S);
        return -1;
    }
    *out_ns = (uint64_t)(v * 1e9);
    if (*out_ns == 0)
        *out_ns = 1;
    return 0;
}

int snapprof__parse_checkpoint(const char *s, uint64_t *out_ns, char *why, size_t why_size)
{
    if (s && (strcasecmp(s, "off") == 0 || strcmp(s, "0") == 0)) {
        *out_ns = 0;
        return 0;
    }
    return snapprof__parse_duration(s, out_ns, why, why_size);
}

int snapprof__parse_loop(const char *s, uint64_t *out_ns, char *why, size_t why_size)
{
    uint64_t secs;
    int rc = snapprof__parse_whole_duration(s, 1, (uint64_t)SNAPPROF_DURATION_MAX_S, &secs);
    if (rc == -ERANGE) {
        WHY("%s is out of range (1 s to %.0f s: files are named to the second)", s,
            SNAPPROF_DURATION_MAX_S);
        return -1;
    }
    if (rc != 0) {
        WHY("'%s' is not an interval (60s, 5m, 1h)", s ? s : "");
        return -1;
    }
    *out_ns = secs * 1000000000u;
    return 0;
}

int snapprof__parse_mode(const char *s, int *wall, char *why, size_t why_size)
{
    if (s && strcasecmp(s, "cpu") == 0)
        *wall = 0;
    else if (s && strcasecmp(s, "wall") == 0)
        *wall = 1;
    else {
        WHY("'%s' is not a mode (cpu or wall)", s ? s : "");
        return -1;
    }
    return 0;
}

int snapprof__parse_fork(const char *s, int *follow, char *why, size_t why_size)
{
    if (s && strcasecmp(s, "follow") == 0)
        *follow = 1;
    else if (s && strcasecmp(s, "stop") == 0)
        *follow = 0;
    else {
        WHY("'%s' is not a fork mode (follow or stop)", s ? s : "");
        return -1;
    }
    return 0;
}

int snapprof__parse_crash(const char *s, int *write, char *why, size_t why_size)
{
    if (s && (strcasecmp(s, "write") == 0 || strcasecmp(s, "on") == 0 || strcmp(s, "1") == 0))
        *write = 1;
    else if (s && (strcasecmp(s, "off") == 0 || strcmp(s, "0") == 0))
        *write = 0;
    else {
        WHY("'%s' is not a crash mode (write or off)", s ? s : "");
        return -1;
    }
    return 0;
}

int snapprof__parse_lines(const char *s, int *lines, char *why, size_t why_size)
{
    if (s && strcasecmp(s, "all") == 0)
        *lines = SNAPPROF_LINES_ALL;
    else if (s && strcasecmp(s, "own") == 0)
        *lines = SNAPPROF_LINES_OWN;
    else if (s && strcasecmp(s, "program") == 0)
        *lines = SNAPPROF_LINES_PROGRAM;
    else {
        WHY("'%s' is not a lines setting (program, all or own)", s ? s : "");
        return -1;
    }
    return 0;
}

int snapprof__parse_trigger(const char *s, int *trigger, char *why, size_t why_size)
{
    /* The names are snapprof_trigger_t's own (SNAPPROF_TRIGGER_MAP). */
    for (int i = 0; i < SNAPPROF_TRIGGER_COUNT; i++) {
        if (s && strcasecmp(s, snapprof_trigger_name((snapprof_trigger_t)i)) == 0) {
            *trigger = i;
            return 0;
        }
    }
    /* "auto, perf, timer or handshake" */
    char names[128];
    size_t len = 0;
    names[0] = '\0';
    for (int i = 0; i < SNAPPROF_TRIGGER_COUNT && len < sizeof names; i++) {
        const char *sep = i == 0 ? "" : i + 1 < SNAPPROF_TRIGGER_COUNT ? ", " : " or ";
        int w = snprintf(names + len, sizeof names - len, "%s%s", sep,
                         snapprof_trigger_name((snapprof_trigger_t)i));
        len += w > 0 ? (size_t)w : 0;
    }
    WHY("'%s' is not a trigger (%s)", s ? s : "", names);
    return -1;
}

int snapprof__parse_wall_blocked(const char *s, int *out, char *why, size_t why_size)
{
    /* In the order of snapprof_wall_blocked_t. */
    static const char *const names[] = {"signal", "proc"};
    for (int i = 0; i < 2; i++) {
        if (s && strcasecmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    WHY("'%s' is not a way to sample blocked threads (signal or proc)", s ? s : "");
    return -1;
}

int snapprof__parse_arm(const char *s, int *demand, char *why, size_t why_size)
{
    if (s && strcasecmp(s, "always") == 0) {
        *demand = 0;
        return 0;
    }
    if (s && strcasecmp(s, "demand") == 0) {
        *demand = 1;
        return 0;
    }
    WHY("'%s' is not when to arm (always or demand)", s ? s : "");
    return -1;
}

/* ------------------------------------------------------------------------ */
/* JIT layouts of perf map code                                             */
/* ------------------------------------------------------------------------ */

/* The largest fixed frame one can ask for: far beyond any JIT's, small
 * enough that every offset fits the layout's fields. */
#define JIT_FRAME_MAX (1u << 20)

/* A multiple of 8 in [lo, JIT_FRAME_MAX], decimal, up to end or ':'. */
static int parse_frame_offset(const char **p, const char *end, uint32_t lo, uint32_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    if (s == end || *s < '0' || *s > '9')
        return -1;
    for (; s < end && *s >= '0' && *s <= '9'; s++)
        if ((v = v * 10 + (uint64_t)(*s - '0')) > JIT_FRAME_MAX)
            return -1;
    if ((s < end && *s != ':') || v < lo || v % 8 != 0)
        return -1;
    *p = s < end ? s + 1 : s;
    *out = (uint32_t)v;
    return 0;
}

/* "fp", "cpython" or "fixed:SIZE[:RA[:FP]]" in [s, end). */
static int parse_jit_layout(const char *s, const char *end, snapprof_jit_layout_t *out)
{
    static const struct {
        const char *name;
        snapprof_jit_layout_kind_t kind;
    } kinds[] = {{"fp", SNAPPROF_JIT_LAYOUT_FRAME_POINTER},
                 {"cpython", SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE},
                 {"fixed", SNAPPROF_JIT_LAYOUT_FIXED_FRAME}};
    size_t len = (size_t)(end - s);
    memset(out, 0, sizeof *out);
    out->saved_fp_offset = SNAPPROF_JIT_FP_UNCHANGED;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t k = strlen(kinds[i].name);
        if (len < k || strncasecmp(s, kinds[i].name, k) != 0)
            continue;
        out->kind = kinds[i].kind;
        if (kinds[i].kind != SNAPPROF_JIT_LAYOUT_FIXED_FRAME)
            return len == k ? 0 : -1;
        const char *p = s + k;
        uint32_t ra, fp;
        if (p == end || *p++ != ':' || parse_frame_offset(&p, end, 8, &out->frame_size) != 0)
            return -1;
        out->return_address_offset = out->frame_size - 8;
        if (p < end) {
            if (parse_frame_offset(&p, end, 0, &ra) != 0 || ra + 8 > out->frame_size)
                return -1;
            out->return_address_offset = ra;
        }
        if (p < end) {
            if (parse_frame_offset(&p, end, 0, &fp) != 0 || fp + 8 > out->frame_size || p < end)
                return -1;
            out->saved_fp_offset = (int32_t)fp;
        }
        return 0;
    }
    return -1;
}

int snapprof__parse_jit_layouts(const char *s, snapprof__jit_rule_t *out, unsigned max, unsigned *n,
                                char *why, size_t why_size)
{
    const char *p = s ? s : "";
    do {
        size_t len = strcspn(p, ",");
        const char *end = p + len, *eq = NULL;
        for (const char *q = p; q < end; q++)
            if (*q == '=')
                eq = q; /* the last: a layout has none */
        const char *layout = eq ? eq + 1 : p;
        size_t prefix_len = eq ? (size_t)(eq - p) : 0;
        if (*n >= max) {
            WHY("more than %u JIT layouts", max);
            return -1;
        }
        snapprof__jit_rule_t *r = &out[*n];
        if (prefix_len >= sizeof r->prefix) {
            WHY("JIT name prefix '%.*s' is longer than %zu bytes", (int)prefix_len, p,
                sizeof r->prefix - 1);
            return -1;
        }
        if (parse_jit_layout(layout, end, &r->layout) != 0) {
            WHY("'%.*s' is not a JIT layout (fp, cpython or fixed:SIZE[:RA[:FP]], "
                "multiples of 8, RA and FP inside SIZE)",
                (int)(end - layout), layout);
            return -1;
        }
        memcpy(r->prefix, p, prefix_len);
        r->prefix[prefix_len] = '\0';
        (*n)++;
        p = end;
    } while (*p++ == ',');
    return 0;
}

static const struct {
    const char *name;
    int signo;
} g_signals[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},       {"QUIT", SIGQUIT}, {"ILL", SIGILL},
    {"TRAP", SIGTRAP}, {"ABRT", SIGABRT},     {"BUS", SIGBUS},   {"FPE", SIGFPE},
    {"KILL", SIGKILL}, {"USR1", SIGUSR1},     {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},
    {"PIPE", SIGPIPE}, {"ALRM", SIGALRM},     {"TERM", SIGTERM}, {"STKFLT", SIGSTKFLT},
    {"CHLD", SIGCHLD}, {"CONT", SIGCONT},     {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},
    {"TTIN", SIGTTIN}, {"TTOU", SIGTTOU},     {"URG", SIGURG},   {"XCPU", SIGXCPU},
    {"XFSZ", SIGXFSZ}, {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH},
    {"IO", SIGIO},     {"POLL", SIGPOLL},     {"PWR", SIGPWR},   {"SYS", SIGSYS},
};

int snapprof__signal_usable(int signo)
{
    if (signo <= 0 || signo >= NSIG)
        return 0;
    if (signo >= 32 && signo < SIGRTMIN)
        return 0; /* glibc's own: thread cancellation and setxid */
    switch (signo) {
    case SIGKILL:
    case SIGSTOP:
    case SIGSEGV:
    case SIGBUS:
    case SIGFPE:
    case SIGILL:
    case SIGABRT:
    case SIGTRAP:
    case SIGSYS:
    case SIGINT:
    case SIGTERM:
    case SIGHUP:
    case SIGQUIT:
    case SIGCHLD:
    case SIGCONT:
    case SIGTSTP:
    case SIGTTIN:
    case SIGTTOU:
    case SIGPIPE:
    case SIGALRM:
        return 0;
    default:
        return 1;
    }
}

const char *snapprof__signal_name(int signo, char *buf, size_t size)
{
    for (size_t i = 0; i < sizeof g_signals / sizeof g_signals[0]; i++) {
        if (g_signals[i].signo == signo) {
            snprintf(buf, size, "SIG%s", g_signals[i].name);
            return buf;
        }
    }
    if (signo >= SIGRTMIN && signo <= SIGRTMAX) {
        if (signo - SIGRTMIN <= SIGRTMAX - signo)
            snprintf(buf, size, "SIGRTMIN+%d", signo - SIGRTMIN);
        else
            snprintf(buf, size, "SIGRTMAX-%d", SIGRTMAX - signo);
        return buf;
    }
    snprintf(buf, size, "signal %d", signo);
    return buf;
}

/* Parses "RTMIN+n" / "RTMAX-n" (after any "SIG"). Returns the signal or 0. */
static int parse_rt(const char *s)
{
    int base, sign;
    if (strncasecmp(s, "RTMIN", 5) == 0) {
        base = SIGRTMIN;
        sign = 1;
    } else if (strncasecmp(s, "RTMAX", 5) == 0) {
        base = SIGRTMAX;
        sign = -1;
    } else {
        return 0;
    }
    s += 5;
    if (*s == '\0')
        return base;
    if (*s != (sign > 0 ? '+' : '-') || !isdigit((unsigned char)s[1]))
        return 0;
    char *end;
    long n = strtol(s + 1, &end, 10);
    if (*end != '\0' || n > SIGRTMAX - SIGRTMIN)
        return 0;
    int signo = base + sign * (int)n;
    return signo >= SIGRTMIN && signo <= SIGRTMAX ? signo : 0;
}

int snapprof__parse_signal(const char *s, int *out, char *why, size_t why_size)
{
    int signo = 0;
    if (s && isdigit((unsigned char)s[0])) {
        char *end;
        long v = strtol(s, &end, 10);
        if (*end == '\0' && v > 0 && v < NSIG)
            signo = (int)v;
    } else if (s) {
        const char *name = strncasecmp(s, "SIG", 3) == 0 ? s + 3 : s;
        for (size_t i = 0; i < sizeof g_signals / sizeof g_signals[0] && !signo; i++)
            if (strcasecmp(name, g_signals[i].name) == 0)
                signo = g_signals[i].signo;
        if (!signo)
            signo = parse_rt(name);
    }
    if (!signo) {
        WHY("'%s' is not a signal (try SIGURG, SIGPROF, SIGRTMIN+4 or a number)", s ? s : "");
        return -1;
    }
    if (!snapprof__signal_usable(signo)) {
        char name[32];
        WHY("%s cannot be the sampling signal (try SIGURG, SIGPROF or SIGRTMIN+4)",
            snapprof__signal_name(signo, name, sizeof name));
        return -1;
    }
    *out = signo;
    return 0;
}

int snapprof__absolute_path(const char *path, char *out, size_t size)
{
    if (!path || !*path)
        return -1;
    if (path[0] == '/') {
        if (strlen(path) >= size)
            return -1;
        strcpy(out, path);
        return 0;
    }
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return -1;
    int n = snprintf(out, size, "%s%s%s", cwd, strcmp(cwd, "/") == 0 ? "" : "/", path);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

int snapprof__check_output(const char *path)
{
    char dir[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof dir)
        return ENAMETOOLONG;
    if (path[len - 1] == '/')
        return EISDIR;
    strcpy(dir, path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    struct stat st;
    if (stat(dir, &st) != 0)
        return errno;
    if (!S_ISDIR(st.st_mode))
        return ENOTDIR;
    if (access(dir, W_OK | X_OK) != 0)
        return errno;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return EISDIR;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Output formats                                                           */
/* ------------------------------------------------------------------------ */

static const struct {
    const char *name, *ext;
} g_formats[SNAPPROF__FORMAT_COUNT] = {
    [SNAPPROF__FORMAT_PPROF] = {"pprof", ".pb.gz"},
    [SNAPPROF__FORMAT_FOLDED] = {"folded", ".folded"},
    [SNAPPROF__FORMAT_TRACE] = {"trace", ".json"},
    [SNAPPROF__FORMAT_GPERFTOOLS] = {"gperftools", ".prof"},
    [SNAPPROF__FORMAT_HEAP] = {"heap", ".pb.gz"},
    [SNAPPROF__FORMAT_HEAP_PEAK] = {"heappeak", ".pb.gz"},
};

const char *snapprof__format_name(snapprof__format_t format)
{
    return (unsigned)format < SNAPPROF__FORMAT_COUNT ? g_formats[format].name : "unknown";
}

const char *snapprof__format_ext(snapprof__format_t format)
{
    return (unsigned)format < SNAPPROF__FORMAT_COUNT ? g_formats[format].ext : "";
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcasecmp(s + n - k, suffix) == 0;
}

snapprof__format_t snapprof__format_of_path(const char *path)
{
    if (ends_with(path, ".folded") || ends_with(path, ".txt"))
        return SNAPPROF__FORMAT_FOLDED;
    if (ends_with(path, ".json"))
        return SNAPPROF__FORMAT_TRACE;
    return SNAPPROF__FORMAT_PPROF;
}

int snapprof__parse_formats(const char *s, snapprof__format_t *out, unsigned max, unsigned *n,
                            char *why, size_t why_size)
{
    const char *p = s ? s : "";
    do {
        size_t len = strcspn(p, ",");
        int found = -1;
        for (int f = 0; f < (int)SNAPPROF__FORMAT_USER_COUNT; f++)
            if (strlen(g_formats[f].name) == len && strncasecmp(p, g_formats[f].name, len) == 0)
                found = f;
        if (found < 0) {
            WHY("'%.*s' is not a format (pprof, folded, trace or gperftools)", (int)len, p);
            return -1;
        }
        if (*n >= max) {
            WHY("more than %u formats", max);
            return -1;
        }
        out[(*n)++] = (snapprof__format_t)found;
        p += len;
    } while (*p++ == ',');
    return 0;
}

/* 1 when two absolute paths name the same file as far as their text says:
 * "//" and "/./" do not count ("a/../b" does, a symlink may be behind it). */
static int same_path(const char *a, const char *b)
{
    for (;;) {
        while (a[0] == '/' && (a[1] == '/' || (a[1] == '.' && (a[2] == '/' || !a[2]))))
            a += a[1] == '/' ? 1 : 2;
        while (b[0] == '/' && (b[1] == '/' || (b[1] == '.' && (b[2] == '/' || !b[2]))))
            b += b[1] == '/' ? 1 : 2;
        if (*a != *b)
            return 0;
        if (!*a)
            return 1;
        a++;
        b++;
    }
}

int snapprof__plan_outputs(const char *const *paths, unsigned n_paths,
                           const snapprof__format_t *formats, unsigned n_formats,
                           snapprof__output_spec_t *out, unsigned *n_out, char *why,
                           size_t why_size)
{
    unsigned n = n_formats ? n_formats : n_paths ? n_paths : 1;
    if (n_formats && n_paths > 1 && n_paths != n_formats) {
        WHY("%u outputs and %u formats: give one format per output, or one output for several "
            "formats",
            n_paths, n_formats);
        return -1;
    }
    if (n > SNAPPROF_OUTPUTS_ASKED_MAX) {
        WHY("%u outputs; at most %u", n, SNAPPROF_OUTPUTS_ASKED_MAX);
        return -1;
    }
    for (unsigned i = 0; i < n; i++) {
        char name[PATH_MAX];
        const char *given = n_paths ? paths[n_paths > 1 ? i : 0] : "snapprof";
        snapprof__format_t f = n_formats ? formats[i] : snapprof__format_of_path(given);
        int len;
        if (n_paths > 1 || (n_paths == 1 && n_formats <= 1))
            len = snprintf(name, sizeof name, "%s", given);
        else if (n_paths == 0 && n_formats == 0)
            len = snprintf(name, sizeof name, "snapprof.pb.gz");
        else
            len = snprintf(name, sizeof name, "%.*s%s", (int)snapprof__name_base_length(given),
                           given, snapprof__format_ext(f));
        if (len < 0 || (size_t)len >= sizeof name ||
            snapprof__absolute_path(name, out[i].path, sizeof out[i].path) != 0) {
            WHY("output path %s is too long", given);
            return -1;
        }
        memcpy(out[i].family, out[i].path, sizeof out[i].family);
        out[i].format = f;
        for (unsigned j = 0; j < i; j++) {
            if (same_path(out[j].path, out[i].path)) {
                WHY("%s would be written twice", out[i].path);
                return -1;
            }
        }
    }
    *n_out = n;
    return 0;
}

int snapprof__parse_heap_interval(const char *s, size_t *out, char *why, size_t why_size)
{
    char *end;
    errno = 0;
    unsigned long long n = s && *s >= '0' && *s <= '9' ? strtoull(s, &end, 10) : 0;
    if (!s || *s < '0' || *s > '9' || errno != 0 || *end != '\0' || n < 1 ||
        n > SNAPPROF_HEAP_INTERVAL_MAX || n > SIZE_MAX) {
        WHY("'%s' is not a number of bytes from 1 to %llu", s ? s : "",
            (unsigned long long)SNAPPROF_HEAP_INTERVAL_MAX);
        return -1;
    }
    *out = (size_t)n;
    return 0;
}

int snapprof__add_heap_outputs(snapprof__preload_config_t *cfg, size_t interval, char *why,
                               size_t why_size)
{
    static const struct {
        const char *kind;
        snapprof__format_t format;
    } kinds[] = {{"heap", SNAPPROF__FORMAT_HEAP}, {"heappeak", SNAPPROF__FORMAT_HEAP_PEAK}};
    const unsigned n_kinds = sizeof kinds / sizeof kinds[0];
    if (cfg->n_outputs < 1 || cfg->n_outputs + n_kinds > SNAPPROF_OUTPUTS_MAX) {
        WHY("no room for the heap outputs beside %u outputs", cfg->n_outputs);
        return -1;
    }
    /* Static: a few pages of paths. Under the caller's lock or at load. */
    static snapprof__output_spec_t add[2];
    for (unsigned k = 0; k < n_kinds; k++) {
        snapprof__output_spec_t *o = &add[k];
        const char *ext = snapprof__format_ext(kinds[k].format);
        if (snapprof__name_kind_family(cfg->outputs[0].family, kinds[k].kind, ext, o->family,
                                       sizeof o->family) != 0 ||
            snapprof__name_kind_family(cfg->outputs[0].path, kinds[k].kind, ext, o->path,
                                       sizeof o->path) != 0) {
            WHY("the heap profile's name after %s is too long a path", cfg->outputs[0].family);
            return -1;
        }
        o->format = kinds[k].format;
        for (unsigned j = 0; j < cfg->n_outputs; j++) {
            if (same_path(cfg->outputs[j].path, o->path)) {
                WHY("%s is already an output", o->path);
                return -1;
            }
        }
    }
    for (unsigned k = 0; k < n_kinds; k++)
        cfg->outputs[cfg->n_outputs++] = add[k];
    cfg->heap_interval = interval;
    return 0;
}

/* SNAPPROF_HEAP and SNAPPROF_HEAP_INTERVAL: see preload_config.h. */
static void heap_from_env(snapprof__preload_config_t *cfg, char *(*get)(const char *name),
                          void (*warn)(const char *fmt, ...))
{
    char why[256];
    const char *v = get(SNAPPROF_ENV_HEAP);
    if (!v || !*v || strcmp(v, "0") == 0)
        return;
    if (strcmp(v, "1") != 0) {
        warn("ignoring %s=%s: want 1 (heap profiles) or 0; no heap profile", SNAPPROF_ENV_HEAP, v);
        return;
    }
    size_t interval = SNAPPROF_HEAP_INTERVAL_DEFAULT;
    if ((v = get(SNAPPROF_ENV_HEAP_INTERVAL)) && *v &&
        snapprof__parse_heap_interval(v, &interval, why, sizeof why) != 0) {
        warn("ignoring %s: %s; sampling every %u bytes on average", SNAPPROF_ENV_HEAP_INTERVAL, why,
             SNAPPROF_HEAP_INTERVAL_DEFAULT);
        interval = SNAPPROF_HEAP_INTERVAL_DEFAULT;
    }
    if (snapprof__add_heap_outputs(cfg, interval, why, sizeof why) != 0)
        warn("no heap profile: %s", why);
}

/* SNAPPROF_ARM: see preload_config.h. After heap_from_env(): the heap
 * outputs are named after the first output, which demand then drops. */
static void arm_from_env(snapprof__preload_config_t *cfg, char *(*get)(const char *name),
                         void (*warn)(const char *fmt, ...))
{
    char why[256];
    const char *v = get(SNAPPROF_ENV_ARM);
    int demand = 0;
    if (!v || !*v)
        return;
    if (snapprof__parse_arm(v, &demand, why, sizeof why) != 0) {
        warn("ignoring %s: %s; armed for the whole run", SNAPPROF_ENV_ARM, why);
        return;
    }
    if (!demand)
        return;
    /* Wall mode reads every thread every tick, and the rolling profiles
     * and the flight recorder take samples all the time. */
    const char *other = cfg->wall        ? SNAPPROF_ENV_MODE "=wall"
                        : cfg->loop_ns   ? SNAPPROF_ENV_LOOP
                        : cfg->flight_ns ? SNAPPROF_ENV_FLIGHT
                                         : NULL;
    if (other) {
        warn("ignoring %s=%s with %s; armed for the whole run", SNAPPROF_ENV_ARM, v, other);
        return;
    }
    cfg->arm_demand = 1;
    unsigned n = 0;
    for (unsigned i = 0; i < cfg->n_outputs; i++)
        if (snapprof__format_is_heap(cfg->outputs[i].format))
            cfg->outputs[n++] = cfg->outputs[i];
    for (unsigned i = n; i < cfg->n_outputs; i++)
        memset(&cfg->outputs[i], 0, sizeof cfg->outputs[i]);
    cfg->n_outputs = n;
}

/* What both entry points read the same way: rate, mode, signal, trigger
 * and how wall mode samples blocked threads. See preload_config.h. */
void snapprof__sampling_from_env(snapprof__preload_config_t *cfg, char *(*get)(const char *name),
                                 void (*warn)(const char *fmt, ...))
{
    char why[256];
    const char *v, *var;
    cfg->hz = SNAPPROF_HZ_DEFAULT;
    if ((v = get(var = SNAPPROF_ENV_FREQUENCY)) ||
        (v = get(var = SNAPPROF_ENV_CPUPROFILE_FREQUENCY))) {
        if (snapprof__parse_hz(v, &cfg->hz, why, sizeof why) != 0) {
            warn("ignoring %s: %s; sampling at %u Hz", var, why, SNAPPROF_HZ_DEFAULT);
            cfg->hz = SNAPPROF_HZ_DEFAULT;
        } else {
            cfg->hz_explicit = 1;
        }
    }
    if ((v = get(SNAPPROF_ENV_MODE))) {
        if (snapprof__parse_mode(v, &cfg->wall, why, sizeof why) != 0) {
            warn("ignoring %s: %s; sampling CPU time", SNAPPROF_ENV_MODE, why);
            cfg->wall = 0;
        }
    } else if ((v = get(SNAPPROF_ENV_CPUPROFILE_REALTIME)) && *v) {
        cfg->wall = 1; /* gperftools' wall-clock switch */
    }
    cfg->signo = SIGURG;
    if ((v = get(SNAPPROF_ENV_SIGNAL))) {
        if (snapprof__parse_signal(v, &cfg->signo, why, sizeof why) == 0)
            cfg->signal_explicit = 1;
        else
            warn("ignoring %s: %s; using SIGURG", SNAPPROF_ENV_SIGNAL, why);
    }
    cfg->trigger = SNAPPROF__TRIGGER_DEFAULT;
    if ((v = get(SNAPPROF_ENV_TRIGGER))) {
        cfg->trigger_explicit = snapprof__parse_trigger(v, &cfg->trigger, why, sizeof why) == 0;
        if (!cfg->trigger_explicit) {
            warn("ignoring %s: %s; using the default", SNAPPROF_ENV_TRIGGER, why);
            cfg->trigger = SNAPPROF__TRIGGER_DEFAULT;
        }
    }
    cfg->wall_blocked = SNAPPROF__WALL_BLOCKED_DEFAULT;
    if ((v = get(SNAPPROF_ENV_WALL_BLOCKED)) &&
        snapprof__parse_wall_blocked(v, &cfg->wall_blocked, why, sizeof why) != 0) {
        warn("ignoring %s: %s; using the default", SNAPPROF_ENV_WALL_BLOCKED, why);
        cfg->wall_blocked = SNAPPROF__WALL_BLOCKED_DEFAULT;
    }
    /* All or nothing: half a list could walk code by the wrong layout. */
    cfg->n_jit_rules = 0;
    if ((v = get(SNAPPROF_ENV_JIT_LAYOUT)) && *v &&
        snapprof__parse_jit_layouts(v, cfg->jit_rules, SNAPPROF_JIT_RULES_MAX, &cfg->n_jit_rules,
                                    why, sizeof why) != 0) {
        warn("ignoring %s: %s; using the default layouts", SNAPPROF_ENV_JIT_LAYOUT, why);
        cfg->n_jit_rules = 0;
    }
    int write = 1;
    if ((v = get(SNAPPROF_ENV_CRASH)) && snapprof__parse_crash(v, &write, why, sizeof why) != 0) {
        warn("ignoring %s: %s; writing the profile on a crash", SNAPPROF_ENV_CRASH, why);
        write = 1;
    }
    cfg->crash_off = !write;
    /* The default reads no DWARF of system libraries' debug files: what a
     * profile's first write costs (issue 28). */
    int lines = SNAPPROF_LINES_PROGRAM;
    if ((v = get(SNAPPROF_ENV_LINES)) && snapprof__parse_lines(v, &lines, why, sizeof why) != 0) {
        warn("ignoring %s: %s; using the default (program)", SNAPPROF_ENV_LINES, why);
        lines = SNAPPROF_LINES_PROGRAM;
    }
    cfg->lines = lines;
}

/* The environment, read: see preload_config.h. */
int snapprof__config_from_env(snapprof__preload_config_t *cfg, char *(*get)(const char *name),
                              void (*warn)(const char *fmt, ...))
{
    memset(cfg, 0, sizeof *cfg);
    const char *var = SNAPPROF_ENV_OUTPUT, *out = get(var);
    if (!out || !*out)
        out = get(var = SNAPPROF_ENV_CPUPROFILE);
    if (!out || !*out)
        return 0;
    char why[256];
    const char *v;
    /* SNAPPROF_OUTPUT is a comma-separated list (empty entries are
     * skipped); CPUPROFILE is one gperftools path, in gperftools' own
     * format unless SNAPPROF_FORMAT says otherwise (pprof: ours). */
    static char list[SNAPPROF_OUTPUTS_ASKED_MAX * PATH_MAX];
    const char *paths[SNAPPROF_OUTPUTS_ASKED_MAX];
    unsigned n_paths = 0;
    snprintf(list, sizeof list, "%s", out);
    int cpuprofile = strcmp(var, SNAPPROF_ENV_CPUPROFILE) == 0;
    for (char *save = NULL, *p = cpuprofile ? list : strtok_r(list, ",", &save); p;
         p = cpuprofile ? NULL : strtok_r(NULL, ",", &save)) {
        if (n_paths == SNAPPROF_OUTPUTS_ASKED_MAX) {
            warn("ignoring %s after its first %u paths", var, SNAPPROF_OUTPUTS_ASKED_MAX);
            break;
        }
        paths[n_paths++] = p;
    }
    if (n_paths == 0)
        return 0;
    snapprof__format_t formats[SNAPPROF_OUTPUTS_ASKED_MAX];
    unsigned n_formats = 0;
    if ((v = get(SNAPPROF_ENV_FORMAT)) && *v) {
        int ok = snapprof__parse_formats(v, formats, SNAPPROF_OUTPUTS_ASKED_MAX, &n_formats, why,
                                         sizeof why) == 0 &&
                 snapprof__plan_outputs(paths, n_paths, formats, n_formats, cfg->outputs,
                                        &cfg->n_outputs, why, sizeof why) == 0;
        if (!ok) {
            /* The outputs may still work without the formats. */
            n_formats = 0;
            cfg->n_outputs = 0;
            warn("ignoring %s: %s; %s", SNAPPROF_ENV_FORMAT, why,
                 cpuprofile ? "writing gperftools' format" : "choosing by the file names");
        }
    }
    if (n_formats == 0 && cpuprofile)
        formats[n_formats++] = SNAPPROF__FORMAT_GPERFTOOLS;
    if ((cfg->n_outputs == 0 || n_formats == 0) &&
        snapprof__plan_outputs(paths, n_paths, formats, n_formats, cfg->outputs, &cfg->n_outputs,
                               why, sizeof why) != 0) {
        warn("not profiling: %s: %s", var, why);
        return 0;
    }
    snapprof__sampling_from_env(cfg, get, warn);
    if ((v = get(SNAPPROF_ENV_DURATION)) &&
        snapprof__parse_duration(v, &cfg->duration_ns, why, sizeof why) != 0) {
        warn("ignoring %s: %s; sampling until exit", SNAPPROF_ENV_DURATION, why);
        cfg->duration_ns = 0;
    }
    if ((v = get(SNAPPROF_ENV_CHECKPOINT)) != NULL) {
        cfg->checkpoint_set = 1;
        if (snapprof__parse_checkpoint(v, &cfg->checkpoint_ns, why, sizeof why) != 0) {
            warn("ignoring %s: %s; writing the profile only at the end", SNAPPROF_ENV_CHECKPOINT,
                 why);
            cfg->checkpoint_ns = 0;
        }
    }
    if ((v = get(SNAPPROF_ENV_LOOP)) && *v &&
        snapprof__parse_loop(v, &cfg->loop_ns, why, sizeof why) != 0) {
        warn("ignoring %s: %s; one profile for the whole run", SNAPPROF_ENV_LOOP, why);
        cfg->loop_ns = 0;
    }
    /* The flight recorder samples at parca-agent's always-on rate unless a
     * rate is given: it runs for the whole life of a service. */
    if ((v = get(SNAPPROF_ENV_FLIGHT)) && *v &&
        snapprof__parse_loop(v, &cfg->flight_ns, why, sizeof why) != 0) {
        warn("ignoring %s: %s; no flight recorder", SNAPPROF_ENV_FLIGHT, why);
        cfg->flight_ns = 0;
    }
    if (cfg->flight_ns && !cfg->hz_explicit) {
        cfg->hz = SNAPPROF_FLIGHT_HZ;
        /* At that rate, by default, each thread's CPU-time timer rather
         * than a perf event (SNAPPROF_FLIGHT_TRIGGER): see there. */
        if (!cfg->trigger_explicit && !cfg->wall && cfg->trigger == SNAPPROF_TRIGGER_AUTO)
            cfg->trigger = SNAPPROF_FLIGHT_TRIGGER;
    }
    cfg->follow_fork = 1;
    if ((v = get(SNAPPROF_ENV_FORK)) &&
        snapprof__parse_fork(v, &cfg->follow_fork, why, sizeof why) != 0) {
        warn("ignoring %s: %s; following children", SNAPPROF_ENV_FORK, why);
        cfg->follow_fork = 1;
    }
    cfg->gperftools_names = cpuprofile;
    if ((v = get(SNAPPROF_ENV_SUMMARY_DIR)) && v[0] == '/')
        snprintf(cfg->summary_dir, sizeof cfg->summary_dir, "%s", v);
    heap_from_env(cfg, get, warn);
    arm_from_env(cfg, get, warn);
    /* Armed only for requests: timers by default up to 100 Hz
     * (SNAPPROF_DEMAND_TIMER_MAX_HZ: why). */
    if (cfg->arm_demand && !cfg->trigger_explicit && cfg->trigger == SNAPPROF_TRIGGER_AUTO &&
        cfg->hz <= SNAPPROF_DEMAND_TIMER_MAX_HZ)
        cfg->trigger = SNAPPROF_TRIGGER_CPU_TIMER;
    return 1;
}
