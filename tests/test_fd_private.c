/* The thread with an fd table of its own (common/fd_private.h, off by
 * default, turned on by each case): a file the
 * library opens for a moment must not take one of the program's fd
 * numbers. record_fds_budget_5000_cpu showed it: under `snapprof record`
 * the program's last open() got 906 where it gets 905 alone, about once in
 * seven full runs, because the sampling thread was reading a /proc file
 * (or opening an ELF file for its CFI) at that moment. */
#include "test.h"

#include <snapprof/snapprof.h>

#include "common/fd_private.h"
#include "common/proc_files.h"
#include "common/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The number the next open() gets: the lowest free one. */
static int lowest_free(void)
{
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    close(fd);
    return fd;
}

static sem_t g_held, g_opened;
static int g_inner_fd = -1;

/* Work that holds its file open until the program's thread has opened
 * one of its own. */
static int hold_open(void *arg)
{
    (void)arg;
    g_inner_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    sem_post(&g_held);
    sem_wait(&g_opened);
    if (g_inner_fd >= 0)
        close(g_inner_fd);
    return 7;
}

static void *hold_open_here(void *arg)
{
    hold_open(arg);
    return NULL;
}

static void *caller(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)snapprof__fd_private_run(hold_open, NULL);
}

/* While our file is open, the program's open() gets the number it would
 * get without us. Without the thread (the work on the caller, as before)
 * it gets the next one: checked by running the same work inline. */
static void program_numbers_kept(void)
{
    snapprof__fd_private_set_enabled(1); /* off by default (fd_private.h) */
    snapprof__seccomp_check();           /* as a profiler's creation does first */
    sem_init(&g_held, 0, 0);
    sem_init(&g_opened, 0, 0);
    int expect = lowest_free();
    pthread_t th;
    ASSERT_OK(pthread_create(&th, NULL, caller, NULL));
    sem_wait(&g_held);
    int mine = open("/dev/null", O_RDONLY | O_CLOEXEC);
    sem_post(&g_opened);
    void *ret;
    pthread_join(th, &ret);
    printf("the program's open got %d (lowest free %d), ours %d in its own table; errno %d\n", mine,
           expect, g_inner_fd, snapprof__fd_private_errno());
    ASSERT_EQ((int)(intptr_t)ret, 7);
    ASSERT_EQ(snapprof__fd_private_errno(), 0);
    ASSERT_EQ(mine, expect);
    close(mine);

    /* The same work on the caller's table: the program's number moves. */
    pthread_t inl;
    sem_init(&g_held, 0, 0);
    sem_init(&g_opened, 0, 0);
    ASSERT_OK(pthread_create(&inl, NULL, hold_open_here, NULL));
    sem_wait(&g_held);
    int moved = open("/dev/null", O_RDONLY | O_CLOEXEC);
    sem_post(&g_opened);
    pthread_join(inl, NULL);
    printf("without the thread: the program's open got %d\n", moved);
    ASSERT_EQ(moved, expect + 1);
    close(moved);
}

/* /proc reads through it give what a read on the caller gives. */
static void proc_read(void)
{
    snapprof__fd_private_set_enabled(1);
    snapprof__seccomp_check();
    char buf[512];
    ssize_t n = snapprof__proc_task_read(getpid(), "stat", buf, sizeof buf);
    ASSERT_GT(n, 0);
    char want[32];
    snprintf(want, sizeof want, "%d (", (int)getpid());
    ASSERT(strncmp(buf, want, strlen(want)) == 0);
    ASSERT_EQ(snapprof__proc_task_read(getpid(), "no-such-file", buf, sizeof buf), -ENOENT);
    ASSERT_EQ(snapprof__fd_private_errno(), 0);
    ASSERT_EQ(snapprof__fd_private_inline_calls(), 0);
}

static int inner(void *arg)
{
    return *(int *)arg + 1;
}

static int outer(void *arg)
{
    /* Called from the work itself: runs there, no wait on itself. */
    return snapprof__fd_private_run(inner, arg) * 10;
}

static void nested(void)
{
    snapprof__fd_private_set_enabled(1);
    snapprof__seccomp_check();
    int v = 4;
    ASSERT_EQ(snapprof__fd_private_run(outer, &v), 50);
}

static atomic_int g_sum;

static int add_one(void *arg)
{
    atomic_fetch_add(&g_sum, *(int *)arg);
    return 0;
}

static void *many_calls(void *arg)
{
    (void)arg;
    int one = 1;
    for (int i = 0; i < 2000; i++)
        snapprof__fd_private_run(add_one, &one);
    return NULL;
}

/* Callers on several threads at once are served one at a time, each once. */
static void concurrent(void)
{
    snapprof__fd_private_set_enabled(1);
    snapprof__seccomp_check();
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        ASSERT_OK(pthread_create(&th[i], NULL, many_calls, NULL));
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    ASSERT_EQ(atomic_load(&g_sum), 8000);
}

/* A fork() child has no such thread until it asks: then it gets one of
 * its own, and its reads work. */
static void fork_child(void)
{
#if defined(__SANITIZE_THREAD__)
    printf("skipped: TSan starts no thread in the child of a multi-threaded fork()\n");
    exit(TEST_SKIP);
#endif
    snapprof__fd_private_set_enabled(1);
    snapprof__seccomp_check();
    char buf[512];
    ASSERT_GT(snapprof__proc_task_read(getpid(), "stat", buf, sizeof buf), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        int ok = snapprof__proc_task_read(getpid(), "stat", buf, sizeof buf) > 0 &&
                 snapprof__fd_private_errno() == 0 && snapprof__fd_private_inline_calls() == 0;
        int v = 1;
        ok = ok && snapprof__fd_private_run(inner, &v) == 2;
        _exit(ok ? 0 : 1);
    }
    int st;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static const test_case_t cases[] = {
    {"program_numbers_kept", program_numbers_kept},
    {"proc_read", proc_read},
    {"nested", nested},
    {"concurrent", concurrent},
    {"fork_child", fork_child},
};

int main(int argc, char **argv)
{
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
