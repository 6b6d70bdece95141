/* The names of failure reasons, triggers and sample kinds, each derived
 * from its table in <snapprof/snapprof.h> (SNAPPROF_FAIL_MAP,
 * SNAPPROF_TRIGGER_MAP, SNAPPROF_SAMPLE_KIND_MAP),
 * as errors.c derives the error names from SNAPPROF_ERRNO_MAP. */
#include <snapprof/snapprof.h>

/* names[value], or "unknown" for a value past the table. */
static const char *name_in(const char *const *names, unsigned count, unsigned value)
{
    return value < count ? names[value] : "unknown";
}

#define SNAPPROF_NAME_(name, value, text) [value] = text,

const char *snapprof_fail_reason_name(snapprof_fail_reason_t reason)
{
    static const char *const names[SNAPPROF_FAIL_COUNT] = {SNAPPROF_FAIL_MAP(SNAPPROF_NAME_)};
    return name_in(names, SNAPPROF_FAIL_COUNT, (unsigned)reason);
}

const char *snapprof_trigger_name(snapprof_trigger_t trigger)
{
    static const char *const names[SNAPPROF_TRIGGER_COUNT] = {SNAPPROF_TRIGGER_MAP(SNAPPROF_NAME_)};
    return name_in(names, SNAPPROF_TRIGGER_COUNT, (unsigned)trigger);
}

const char *snapprof_sample_kind_name(snapprof_sample_kind_t kind)
{
    static const char *const names[SNAPPROF_SAMPLE_KIND_COUNT] = {
        SNAPPROF_SAMPLE_KIND_MAP(SNAPPROF_NAME_)};
    return name_in(names, SNAPPROF_SAMPLE_KIND_COUNT, (unsigned)kind);
}
