/* The stats text moved to common/stats_text.h (profile_builder/ no longer
 * calls into sampling_thread/ for names): this forwarder keeps the
 * includes of other components working until they name the new place. */
#ifndef SNAPPROF_PROFILE_BUILDER_STATS_TEXT_H
#define SNAPPROF_PROFILE_BUILDER_STATS_TEXT_H

#include "common/stats_text.h"

#endif
