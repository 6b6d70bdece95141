/* Profile builders as the profiler core sees them, and what the built-in
 * builders share. Internal. */
#ifndef SNAPPROF_PROFILE_BUILDER_INTERNAL_H
#define SNAPPROF_PROFILE_BUILDER_INTERNAL_H

#include <snapprof/profile_builder.h>

struct snapprof__output;

struct snapprof_builder {
    const snapprof_builder_ops_t *ops;
    void *user_data;
    /* The built-in file builders (pprof, folded, trace): where they write,
     * so snapprof_builder_set_path() can move them; NULL for others. */
    struct snapprof__output *output;
};

/* ------------------------------------------------------------------------ */
/* Output files (builder_output.c)                                          */
/* ------------------------------------------------------------------------ */

/* Where a builder writes: an absolute, existing, writable directory and the
 * full path in it, fixed when the builder is created so that a bad path
 * fails early and a later chdir() cannot move the output. */
typedef struct snapprof__output {
    char *dir;
    char *path;
} snapprof__output_t;

/* Checks path and fills out (malloc'd strings). Returns 0 or a negative
 * errno (-EINVAL, -EISDIR, -ENOTDIR, -EACCES, -ENOENT, -ENOMEM). */
int snapprof__output_resolve(const char *path, snapprof__output_t *out);
void snapprof__output_free(snapprof__output_t *o);

/* Opens a new temporary file (mode 0600) in o->dir. Returns its fd and the
 * malloc'd path in *tmp, or a negative errno. */
int snapprof__output_open_temp(const snapprof__output_t *o, char **tmp);

/* Finishes a temporary file: with err == 0, gives it mode 0644 & ~umask,
 * fsyncs, closes and renames it over o->path (readers see the old file or
 * the whole new one; a symlink there is replaced, never followed);
 * otherwise, or when any step fails, closes and removes it. Frees tmp.
 * Returns err or the first failure. */
int snapprof__output_commit(const snapprof__output_t *o, int fd, char *tmp, int err);

/* write(2) until done, retrying EINTR. Returns 0 or a negative errno. */
int snapprof__output_write_all(int fd, const void *data, size_t len);

/* Writes data to o->path atomically (open_temp, write_all, commit). */
int snapprof__output_write(const snapprof__output_t *o, const void *data, size_t len);

#endif
