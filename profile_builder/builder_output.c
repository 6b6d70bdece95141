/* Output files of the builders: a path checked when the builder is created,
 * and an atomic replace (temporary file in the same directory, fsync,
 * rename) when the profile is written. */
#include "profile_builder_internal.h"

#include "common/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int snapprof__output_resolve(const char *path, snapprof__output_t *out)
{
    out->dir = out->path = NULL;
    if (path == NULL || path[0] == '\0')
        return -EINVAL;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (base[0] == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return -EISDIR;
    char *dir;
    if (slash == NULL)
        dir = strdup(".");
    else if (slash == path)
        dir = strdup("/");
    else
        dir = strndup(path, (size_t)(slash - path));
    if (dir == NULL)
        return -ENOMEM;
    char *real = realpath(dir, NULL);
    int err = real ? 0 : -errno;
    free(dir);
    if (err != 0)
        return err;
    struct stat st;
    if (stat(real, &st) < 0)
        err = -errno;
    else if (!S_ISDIR(st.st_mode))
        err = -ENOTDIR;
    else if (access(real, W_OK | X_OK) < 0)
        err = -errno;
    if (err != 0) {
        free(real);
        return err;
    }
    size_t real_len = strlen(real);
    int needs_slash = real_len == 0 || real[real_len - 1] != '/';
    size_t full_len = real_len + (size_t)needs_slash + strlen(base) + 1;
    char *full = malloc(full_len);
    if (full == NULL) {
        free(real);
        return -ENOMEM;
    }
    snprintf(full, full_len, "%s%s%s", real, needs_slash ? "/" : "", base);
    /* A directory at the destination would make the rename at stop fail
     * with EISDIR after the whole run was collected: say so now. */
    if (stat(full, &st) == 0 && S_ISDIR(st.st_mode)) {
        free(full);
        free(real);
        return -EISDIR;
    }
    out->dir = real;
    out->path = full;
    return 0;
}

void snapprof__output_free(snapprof__output_t *o)
{
    free(o->dir);
    free(o->path);
    o->dir = o->path = NULL;
}

int snapprof__output_write_all(int fd, const void *data, size_t len)
{
    const unsigned char *p = data;
    while (len > 0) {
        ssize_t n;
        if (snapprof__fault(SNAPPROF__FAULT_WRITE)) {
            errno = ENOSPC;
            n = -1;
        } else {
            n = write(fd, p, len);
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EIO;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int snapprof__output_open_temp(const snapprof__output_t *o, char **tmp)
{
    static const char tmpl[] = "/.snapprof-XXXXXX";
    size_t dir_len = strlen(o->dir);
    char *t = malloc(dir_len + sizeof tmpl);
    if (t == NULL)
        return -ENOMEM;
    memcpy(t, o->dir, dir_len);
    memcpy(t + dir_len, tmpl, sizeof tmpl);
    /* mkostemp opens with O_CREAT | O_EXCL and mode 0600. */
    int fd = -1;
    if (snapprof__fault(SNAPPROF__FAULT_OPEN))
        errno = EMFILE;
    else
        fd = mkostemp(t, O_CLOEXEC);
    if (fd < 0) {
        int err = -errno;
        free(t);
        return err;
    }
    *tmp = t;
    return fd;
}

/* The process umask, read without changing it: umask(2) can only be read
 * by setting it, which would race with other threads creating files. Plain
 * read(2) into a stack buffer, so it cannot fail for want of memory. */
static mode_t current_umask(void)
{
    mode_t mask = 022;
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mask;
    char buf[4096];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - len)) != 0) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    const char *line = strstr(buf, "\nUmask:");
    if (line != NULL)
        mask = (mode_t)strtoul(line + sizeof "\nUmask:" - 1, NULL, 8) & 0777;
    return mask;
}

/* Makes the rename durable. A failure here does not undo the write, so it
 * is not reported. */
static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

int snapprof__output_commit(const snapprof__output_t *o, int fd, char *tmp, int err)
{
    /* Give the file the mode an ordinary creat() would have. */
    if (err == 0 && fchmod(fd, 0644 & ~current_umask()) < 0)
        err = -errno;
    if (err == 0 && fsync(fd) < 0)
        err = -errno;
    if (close(fd) < 0 && err == 0)
        err = -errno;
    if (err == 0 && rename(tmp, o->path) < 0)
        err = -errno;
    if (err != 0)
        unlink(tmp);
    else
        sync_dir(o->dir);
    free(tmp);
    return err;
}

int snapprof__output_write(const snapprof__output_t *o, const void *data, size_t len)
{
    char *tmp;
    int fd = snapprof__output_open_temp(o, &tmp);
    if (fd < 0)
        return fd;
    return snapprof__output_commit(o, fd, tmp, snapprof__output_write_all(fd, data, len));
}
