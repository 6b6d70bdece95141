/* Readers of the small /proc files about our own threads and memory (see
 * proc_files.h): no malloc, no stdio, one transient O_CLOEXEC fd each, in
 * a table of its own where it can be (fd_private.h). */
#include "common/fd_private.h"
#include "common/hex.h"
#include "common/proc_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* Writes "/proc/self/task/TID/NAME" into path. Returns 0, or -ENOENT for a
 * tid that cannot be one or a name that does not fit. */
static int task_path(char *path, size_t size, pid_t tid, const char *name)
{
    static const char prefix[] = "/proc/self/task/";
    char digits[16];
    size_t nd = 0, nn = strlen(name);
    if (tid <= 0)
        return -ENOENT;
    for (unsigned v = (unsigned)tid; v != 0; v /= 10)
        digits[nd++] = (char)('0' + v % 10);
    if (sizeof prefix - 1 + nd + 1 + nn + 1 > size)
        return -ENOENT;
    char *p = path;
    memcpy(p, prefix, sizeof prefix - 1);
    p += sizeof prefix - 1;
    while (nd > 0)
        *p++ = digits[--nd];
    *p++ = '/';
    memcpy(p, name, nn + 1);
    return 0;
}

typedef struct small_read {
    const char *path;
    char *buf;
    size_t size;
    ssize_t got;
} small_read_t;

/* Reads a whole small file into buf (NUL-terminated) with one read():
 * r->got is the length (> 0) or a negative errno. */
static int read_small_here(void *arg)
{
    small_read_t *r = arg;
    int fd = open(r->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        r->got = -errno;
        return 0;
    }
    ssize_t n = read(fd, r->buf, r->size - 1);
    int err = errno;
    close(fd);
    if (n > 0)
        r->buf[n] = '\0';
    r->got = n > 0 ? n : n == 0 ? -ENODATA : -err;
    return 0;
}

/* read_small_here() on the thread with an fd table of its own
 * (fd_private.h): its fd never takes one of the program's numbers. The
 * preload library's own copy of this file (its helper thread's reads: a
 * look a second) cannot reach that thread, an internal of libsnapprof.so,
 * and reads on the caller. */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
    small_read_t r = {.path = path, .buf = buf, .size = size};
#ifdef SNAPPROF_PROC_FILES_CALLER_TABLE
    read_small_here(&r);
#else
    snapprof__fd_private_run(read_small_here, &r);
#endif
    return r.got;
}

ssize_t snapprof__proc_task_read(pid_t tid, const char *name, char *buf, size_t size)
{
    char path[64];
    int rc = task_path(path, sizeof path, tid, name);
    return rc != 0 ? rc : read_small(path, buf, size);
}

/* Parses the hexadecimal number at *s (at least one digit) and moves *s
 * past it. Returns 0, or -1 when there is no digit. */
static int parse_hex(const char **s, uint64_t *out)
{
    const char *p = *s;
    uint64_t v = 0;
    int d;
    if (snapprof__hex_digit(*p) < 0)
        return -1;
    while ((d = snapprof__hex_digit(*p)) >= 0) {
        v = v << 4 | (uint64_t)d;
        p++;
    }
    *s = p;
    *out = v;
    return 0;
}

/* The same, in decimal. */
static int parse_dec(const char **s, uint64_t *out)
{
    const char *p = *s;
    uint64_t v = 0;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9')
        v = v * 10 + (uint64_t)(*p++ - '0');
    *s = p;
    *out = v;
    return 0;
}

static const char *skip_blanks(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

int snapprof__proc_task_sigset(pid_t tid, const char *line_name, uint64_t *mask)
{
    char buf[4096], key[16];
    if (strlen(line_name) + 3 > sizeof key)
        return -1;
    if (snapprof__proc_task_read(tid, "status", buf, sizeof buf) < 0)
        return -1;
    /* "\nSigBlk:": never the first line (that is "Name:"), and a name's
     * own newlines are escaped in this file. */
    size_t nk = strlen(line_name);
    key[0] = '\n';
    memcpy(key + 1, line_name, nk);
    key[nk + 1] = ':';
    key[nk + 2] = '\0';
    const char *line = strstr(buf, key);
    if (!line)
        return -1;
    const char *s = skip_blanks(line + nk + 2);
    return parse_hex(&s, mask) != 0 ? -1 : 0;
}

int snapprof__proc_task_sigset_has(pid_t tid, const char *line_name, int signo)
{
    uint64_t mask;
    if (signo < 1 || signo > 64 || snapprof__proc_task_sigset(tid, line_name, &mask) != 0)
        return 0;
    return (int)((mask >> (signo - 1)) & 1u);
}

int snapprof__proc_task_state(pid_t tid)
{
    char buf[512];
    ssize_t n = snapprof__proc_task_read(tid, "stat", buf, sizeof buf);
    if (n < 0)
        return (int)n;
    /* "tid (comm) S ...": comm may hold spaces and parentheses. */
    const char *paren = strrchr(buf, ')');
    if (!paren || paren[1] != ' ')
        return -EPROTO;
    return (unsigned char)paren[2];
}

void snapprof__proc_task_comm(pid_t tid, char name[16])
{
    if (snapprof__proc_task_read(tid, "comm", name, 16) < 0) {
        name[0] = '\0';
        return;
    }
    name[strcspn(name, "\n")] = '\0';
}

static atomic_ulong g_lines_parsed;

unsigned long snapprof__proc_maps_lines_parsed(void)
{
    return atomic_load_explicit(&g_lines_parsed, memory_order_relaxed);
}

int snapprof__proc_maps_open(snapprof__proc_maps_t *it)
{
    it->fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (it->fd < 0)
        return -errno;
    it->eof = 0;
    it->skip = 0;
    it->exec_only = 0;
    it->len = it->pos = 0;
    return 0;
}

void snapprof__proc_maps_close(snapprof__proc_maps_t *it)
{
    if (it->fd >= 0)
        close(it->fd);
    it->fd = -1;
}

/* Parses one NUL-terminated line: "start-end perms offset major:minor
 * inode [path]". Returns 0, or -1 when it does not parse. */
static int parse_map_line(char *line, snapprof__proc_map_t *m)
{
    const char *s = line;
    uint64_t start, end, major, minor;
    if (parse_hex(&s, &start) != 0 || *s++ != '-' || parse_hex(&s, &end) != 0 || *s++ != ' ')
        return -1;
    for (int i = 0; i < 4; i++) {
        if (*s == '\0' || *s == ' ')
            return -1;
        m->perms[i] = *s++;
    }
    m->perms[4] = '\0';
    s = skip_blanks(s);
    if (parse_hex(&s, &m->offset) != 0)
        return -1;
    s = skip_blanks(s);
    if (parse_hex(&s, &major) != 0 || *s++ != ':' || parse_hex(&s, &minor) != 0)
        return -1;
    s = skip_blanks(s);
    if (parse_dec(&s, &m->inode) != 0)
        return -1;
    m->start = (uintptr_t)start;
    m->end = (uintptr_t)end;
    m->dev_major = (unsigned)major;
    m->dev_minor = (unsigned)minor;
    m->path = skip_blanks(s);
    return 0;
}

/* Whether a NUL-terminated maps line is one of an executable mapping, by
 * its third permission letter alone ("start-end r-xp ..."). A line too
 * short to say is kept, for parse_map_line() to judge. */
static int line_exec(const char *line)
{
    const char *sp = strchr(line, ' ');
    if (!sp || !sp[1] || !sp[2] || !sp[3])
        return 1;
    return sp[3] == 'x';
}

/* Reads more of the file after the it->len bytes in the buffer. Returns 0
 * (it->eof set at the end) or a negative errno. */
static int fill(snapprof__proc_maps_t *it)
{
    for (;;) {
        ssize_t n = read(it->fd, it->buf + it->len, sizeof it->buf - 1 - it->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            it->eof = 1;
        it->len += (size_t)n;
        return 0;
    }
}

int snapprof__proc_maps_next(snapprof__proc_maps_t *it, snapprof__proc_map_t *m)
{
    for (;;) {
        char *line = it->buf + it->pos;
        char *nl = memchr(line, '\n', it->len - it->pos);
        if (it->skip) {
            /* The rest of a line too long for the buffer. */
            if (nl) {
                it->pos = (size_t)(nl + 1 - it->buf);
                it->skip = 0;
            } else {
                it->pos = it->len = 0;
                if (it->eof)
                    return 0;
                int rc = fill(it);
                if (rc != 0)
                    return rc;
            }
            continue;
        }
        int cut = 0;
        if (nl) {
            *nl = '\0';
            it->pos = (size_t)(nl + 1 - it->buf);
        } else if (it->eof || (it->pos == 0 && it->len == sizeof it->buf - 1)) {
            if (it->pos == it->len)
                return 0; /* the end */
            /* The last line without its newline, or one longer than the
             * buffer: what the buffer holds, the rest skipped. */
            it->buf[it->len] = '\0';
            cut = !it->eof;
            it->skip = cut;
            it->pos = it->len;
        } else {
            /* A part line: to the front, then more after it. */
            memmove(it->buf, line, it->len - it->pos);
            it->len -= it->pos;
            it->pos = 0;
            int rc = fill(it);
            if (rc != 0)
                return rc;
            continue;
        }
        if (it->exec_only && !line_exec(line))
            continue;
        atomic_fetch_add_explicit(&g_lines_parsed, 1, memory_order_relaxed);
        if (parse_map_line(line, m) == 0) {
            m->path_cut = cut;
            return 1;
        }
    }
}
