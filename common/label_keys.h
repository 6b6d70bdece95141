/* The label keys the library sets on samples itself, in one table, so that
 * the components that set them and the calls that refuse them as a
 * program's label or attached counter (-EINVAL) spell each key once.
 * Internal; the public list is the comment above snapprof_label_set_str()
 * in <snapprof/snapprof.h>, which must name the same keys.
 *
 * A key lives here, and not in labels/, because several components set
 * them and events/ refuses them too: labels/ already depends on events/
 * (its capture copies the zone), so events/ must not depend on labels/. */
#ifndef SNAPPROF_COMMON_LABEL_KEYS_H
#define SNAPPROF_COMMON_LABEL_KEYS_H

#include <stddef.h>
#include <string.h>

/* XX(key), with who sets it; the key is the name spelled as a string, and
 * snapprof__key_<key> is that string. */
#define SNAPPROF__RESERVED_LABEL_KEYS(XX)                                                          \
    XX(thread_id)   /* the pprof builders: every sample's thread */                                \
    XX(thread_name) /* the pprof builder: every sample's thread name */                            \
    XX(frame)       /* labels/: the app frame in progress */                                       \
    XX(hitch)       /* the pprof builder: whether that frame was a hitch */                        \
    XX(zone)        /* events/: the innermost zone */                                              \
    XX(state)       /* sampling_thread/, wall mode: running, runnable or blocked */                \
    XX(syscall)     /* sampling_thread/, wall mode: the system call a thread blocks in */

#define SNAPPROF__LABEL_KEY_(key)                                                                  \
    static const char snapprof__key_##key[] __attribute__((unused)) = #key;
SNAPPROF__RESERVED_LABEL_KEYS(SNAPPROF__LABEL_KEY_)
#undef SNAPPROF__LABEL_KEY_

/* Whether key is one the library sets itself, which programs may not use
 * as a label or an attached counter. Any thread. */
static inline int snapprof__label_key_reserved(const char *key)
{
    static const char *const keys[] = {
#define SNAPPROF__LABEL_KEY_(key) snapprof__key_##key,
        SNAPPROF__RESERVED_LABEL_KEYS(SNAPPROF__LABEL_KEY_)
#undef SNAPPROF__LABEL_KEY_
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(key, keys[i]) == 0)
            return 1;
    return 0;
}

#endif
