/* The names of failure reasons, triggers and sample kinds, each derived
 * from its table in <snapprof/snapprof.h> (SNAPPROF_FAIL_MAP,
 * SNAPPROF_TRIGGER_MAP, SNAPPROF_SAMPLE_KIND_MAP),
 * as errors.c derives the error names from SNAPPROF_ERRNO_MAP. */
#include <snapprof/snapprof.h>

const char *snapprof_fail_reason_name(snapprof_fail_reason_t reason)
{
    static const char *const names[SNAPPROF_FAIL_COUNT] = {
#define SNAPPROF_FAIL_NAME_(name, value, text) [value] = text,
        SNAPPROF_FAIL_MAP(SNAPPROF_FAIL_NAME_)
#undef SNAPPROF_FAIL_NAME_
    };
    if ((unsigned)reason >= SNAPPROF_FAIL_COUNT)
        return "unknown";
    return names[reason];
}

const char *snapprof_trigger_name(snapprof_trigger_t trigger)
{
    static const char *const names[SNAPPROF_TRIGGER_COUNT] = {
#define SNAPPROF_TRIGGER_NAME_(name, value, text) [value] = text,
        SNAPPROF_TRIGGER_MAP(SNAPPROF_TRIGGER_NAME_)
#undef SNAPPROF_TRIGGER_NAME_
    };
    if ((unsigned)trigger >= SNAPPROF_TRIGGER_COUNT)
        return "unknown";
    return names[trigger];
}

const char *snapprof_sample_kind_name(snapprof_sample_kind_t kind)
{
    static const char *const names[SNAPPROF_SAMPLE_KIND_COUNT] = {
#define SNAPPROF_SAMPLE_KIND_NAME_(name, value, text) [value] = text,
        SNAPPROF_SAMPLE_KIND_MAP(SNAPPROF_SAMPLE_KIND_NAME_)
#undef SNAPPROF_SAMPLE_KIND_NAME_
    };
    if ((unsigned)kind >= SNAPPROF_SAMPLE_KIND_COUNT)
        return "unknown";
    return names[kind];
}
