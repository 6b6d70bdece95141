/* What `snapprof record` says of a module whose frames have no names: the
 * Debian package that owns the file and where that package's debug files
 * are. Runs in the command, after the program ended, never inside it. */
#ifndef SNAPPROF_CLI_DEBUG_HINT_H
#define SNAPPROF_CLI_DEBUG_HINT_H

#include <stddef.h>

/* The package dpkg says owns path (its name without ":arch"), tried as
 * given, without a leading "/usr" (a merged-/usr system lists
 * /lib/x86_64-linux-gnu/liblzma.so.5 as installed under /lib) and through
 * symbolic links; dpkg gets at most timeout_ms in all. Returns 1 with the
 * name in out, 0 when the file belongs to no package, -1 when dpkg could
 * not say (absent, or out of time). dpkg runs with the environment minus
 * LD_PRELOAD's preload library and snapprof's variables: preload is what
 * `record` left in its own environment for the program. */
int snapprof__dpkg_owner(const char *path, const char *preload_to_drop, int timeout_ms, char *out,
                         size_t size);

/* The package in Debian 12's main archive that holds the debug files of
 * pkg's programs, or NULL when its debug symbols are only in the debug
 * archive (pkg-dbgsym). */
const char *snapprof__debug_package(const char *pkg);

/* One sentence for pkg: the apt-get command that gives names, or where
 * the -dbgsym package is. */
void snapprof__debug_hint(const char *pkg, char *out, size_t size);

#endif
