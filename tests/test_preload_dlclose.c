/* A host that dlopen()s libsnapprof-preload.so (its constructor starts a
 * whole-process profile, installs its signal handlers and starts its
 * helper thread), runs, dlclose()s it, and goes on running with signals
 * arriving: SIGINT/SIGTERM/SIGHUP and the fault signals still go to
 * handlers of the preload, its helper thread and its profile go on. Without
 * -z nodelete the dlclose() unmapped all of that: those handlers pointed at
 * unmapped code, and a child sent SIGTERM died of SIGSEGV. Exits 0 when
 * no handler is left unmapped, the child died of SIGTERM and the profile
 * was written at exit (into a directory of its own under $TMPDIR or /tmp,
 * removed after); says whether the library stayed.
 *
 * Usage: preload_dlclose_prog LIBSNAPPROF-PRELOAD.so */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_stop;
static char g_dir[4096], g_out[4200];

static void *burner(void *arg)
{
    (void)arg;
    volatile unsigned long x = 1;
    while (!atomic_load(&g_stop))
        for (int i = 0; i < 10000; i++)
            x = x * 6364136223846793005u + 1;
    return NULL;
}

static void *short_thread(void *arg)
{
    (void)arg;
    volatile unsigned long x = 1;
    for (int i = 0; i < 100000; i++)
        x = x * 6364136223846793005u + 1;
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs for seconds of wall time with threads coming and going. */
static int run_for(double seconds)
{
    double end = now_s() + seconds;
    while (now_s() < end) {
        pthread_t s;
        if (pthread_create(&s, NULL, short_thread, NULL) != 0)
            return -1;
        pthread_join(s, NULL);
        usleep(2000);
    }
    return 0;
}

/* Registered before the library's own exit handler, so run after it. */
static void check_profile(void)
{
    struct stat st;
    int written = stat(g_out, &st) == 0 && st.st_size > 0;
    printf("profile %s at exit\n", written ? "written" : "NOT written");
    fflush(stdout);
    unlink(g_out);
    rmdir(g_dir);
    if (!written)
        _exit(3);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s LIBSNAPPROF-PRELOAD.so\n", argv[0]);
        return 2;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/preload_dlclose.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(g_dir) == NULL)
        return 1;
    snprintf(g_out, sizeof g_out, "%s/cpu.pb.gz", g_dir);
    atexit(check_profile);
    setenv("SNAPPROF_OUTPUT", g_out, 1);
    setenv("SNAPPROF_FREQUENCY", "500", 1);
    setenv("SNAPPROF_FORK", "stop", 1); /* the SIGTERM child below writes nothing */
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&th[i], NULL, burner, NULL) != 0)
            return 1;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    if (run_for(0.3) != 0)
        return 1;
    if (dlclose(h) != 0) {
        fprintf(stderr, "dlclose: %s\n", dlerror());
        return 1;
    }
    void *still = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
    printf("after dlclose the library is %s\n", still ? "still loaded" : "unloaded");
    fflush(stdout);
    if (still)
        dlclose(still);

    /* The profile goes on: sampling signals on the burners, threads that
     * come and go, the helper thread waiting for work. */
    if (run_for(0.5) != 0)
        return 1;
    /* Every handler the library installed must still be mapped. */
    static const int sigs[] = {SIGHUP, SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    int unmapped = 0;
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction cur;
        Dl_info info;
        if (sigaction(sigs[i], NULL, &cur) == 0 && cur.sa_handler != SIG_DFL &&
            cur.sa_handler != SIG_IGN && dladdr((void *)cur.sa_handler, &info) == 0) {
            printf("signal %d: the handler points at unmapped code\n", sigs[i]);
            unmapped++;
        }
    }
    /* A signal that ends the program runs that handler: a child sent
     * SIGTERM must die of SIGTERM. */
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        raise(SIGTERM);
        _exit(0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        return 1;
    int term = WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM;
    printf("a child sent SIGTERM %s\n", term                  ? "died of SIGTERM"
                                        : WIFSIGNALED(status) ? strsignal(WTERMSIG(status))
                                                              : "exited");
    atomic_store(&g_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    printf("survived: 0.5 s of profiling after dlclose; %d handlers unmapped\n", unmapped);
    fflush(stdout);
    return unmapped == 0 && term ? 0 : 1; /* exit() writes the profile */
}
