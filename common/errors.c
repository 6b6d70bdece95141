/* Error descriptions and names, both derived from the one table of error
 * codes in <snapprof/snapprof.h> (SNAPPROF_ERRNO_MAP). */
#include <snapprof/snapprof.h>

#include <stddef.h>
#include <string.h>

typedef struct {
    int code;
    const char *name;
    const char *description;
} error_entry_t;

static const error_entry_t k_errors[] = {{0, "OK", "success"},
#define SNAPPROF_ERRNO_ENTRY_(name, value, description) {value, "SNAPPROF_" #name, description},
                                         SNAPPROF_ERRNO_MAP(SNAPPROF_ERRNO_ENTRY_)
#undef SNAPPROF_ERRNO_ENTRY_
};

/* The table's entry for err, or NULL. */
static const error_entry_t *error_entry(int err)
{
    for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++)
        if (k_errors[i].code == err)
            return &k_errors[i];
    return NULL;
}

/* The errno number a negated errno value stands for, or 0. */
static int errno_of(int err)
{
    return err < 0 && err > -4096 ? -err : 0;
}

const char *snapprof_strerror(int err)
{
    const error_entry_t *e = error_entry(err);
    const char *s = e ? e->description : errno_of(err) ? strerrordesc_np(errno_of(err)) : NULL;
    return s ? s : "unknown error";
}

const char *snapprof_err_name(int err)
{
    const error_entry_t *e = error_entry(err);
    const char *s = e ? e->name : errno_of(err) ? strerrorname_np(errno_of(err)) : NULL;
    return s ? s : "UNKNOWN";
}
