/* Readers of the small /proc files about our own threads and memory:
 * /proc/self/task/TID/{status,stat,comm,schedstat} read whole in one go,
 * and /proc/self/maps line by line. Internal.
 *
 * No malloc, no stdio; the caller supplies every buffer (the maps
 * iterator's is inside its state). A whole-file read opens its file on
 * the thread with an fd table of its own (common/fd_private.h: a lock and
 * a hand-off; made at the first read, which pthread_create()s it), so its
 * fd never takes one of the program's numbers, and is closed before the
 * call returns; where there is no such thread, on the caller, as the
 * lowest free number for a few system calls. The maps iterator keeps its
 * fd across calls, on the caller's table. None of this is the fd budget
 * of common/fds.h, which is for the files kept open (stack_copier_proc.c
 * caches the syscall and schedstat files it re-reads every tick; those
 * are not read here). No signal handler calls them. */
#ifndef SNAPPROF_COMMON_PROC_FILES_H
#define SNAPPROF_COMMON_PROC_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Reads /proc/self/task/TID/NAME into buf, NUL-terminated: what one read()
 * of up to size - 1 bytes gives (the whole of these small files). Returns
 * the length (> 0), or a negative errno (-ENODATA for an empty file). */
ssize_t snapprof__proc_task_read(pid_t tid, const char *name, char *buf, size_t size);

/* 1 when the line_name line ("SigBlk", "SigPnd", ...) of thread tid's
 * status has signo (1..64) set; 0 when it does not, or when the file
 * cannot be read or has no such line. */
int snapprof__proc_task_sigset_has(pid_t tid, const char *line_name, int signo);

/* The whole line_name set of thread tid's status into *mask (bit signo - 1
 * for signal signo), with one read: for callers that test several signals.
 * Returns 0, or -1 when the file cannot be read or has no such line. */
int snapprof__proc_task_sigset(pid_t tid, const char *line_name, uint64_t *mask);

/* The state letter of thread tid ('R' running or runnable, 'S', 'D', ...)
 * from its stat line ("tid (comm) S ...": comm may hold spaces and
 * parentheses), or a negative errno when it cannot be read (-EPROTO: the
 * line did not parse). */
int snapprof__proc_task_state(pid_t tid);

/* Thread tid's name from its comm file, NUL-terminated, newline dropped;
 * "" when it cannot be read. */
void snapprof__proc_task_comm(pid_t tid, char name[16]);

/* One line of /proc/self/maps. path points into the iterator's buffer and
 * is valid until its next call: "" for anonymous memory, else the rest of
 * the line without its newline ("[stack]", a file's path, which may end in
 * " (deleted)"). */
typedef struct snapprof__proc_map {
    uintptr_t start, end;
    char perms[5]; /* "r-xp" */
    uint64_t offset;
    unsigned dev_major, dev_minor;
    uint64_t inode;
    const char *path;
    int path_cut; /* the line was longer than the buffer: path is cut */
} snapprof__proc_map_t;

/* Large enough for a path of PATH_MAX bytes and the fields before it. */
#define SNAPPROF__PROC_MAPS_BUF 8192

/* The state of one pass over /proc/self/maps (8 KiB: on the stack of a
 * caller that has room for it). */
typedef struct snapprof__proc_maps {
    int fd;
    int eof;
    int skip; /* the rest of a line too long for buf is skipped */
    /* Set by the caller after open to get only the executable lines: the
     * others are skipped unparsed. Under TSan a process has ~700 lines, of
     * which ~20 executable, and parsing them all, every byte checked, was
     * most of a module refresh (soak finding 9). */
    int exec_only;
    size_t len, pos; /* bytes in buf; where the next line starts */
    char buf[SNAPPROF__PROC_MAPS_BUF];
} snapprof__proc_maps_t;

/* Opens /proc/self/maps for it. Returns 0 or a negative errno (nothing to
 * close then). */
int snapprof__proc_maps_open(snapprof__proc_maps_t *it);

/* The next line that parses into *m (one that does not is skipped).
 * Returns 1, 0 at the end, or a negative errno when a read failed. */
int snapprof__proc_maps_next(snapprof__proc_maps_t *it, snapprof__proc_map_t *m);

/* Closes the file. */
void snapprof__proc_maps_close(snapprof__proc_maps_t *it);

/* How many lines of /proc/self/maps the iterators have parsed, all
 * together (a test seam: what a pass costs). */
unsigned long snapprof__proc_maps_lines_parsed(void);

#endif
