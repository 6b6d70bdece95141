/* A host that dlopen()s libsnapprof.so, profiles, and dlclose()s it, then
 * goes on: its threads still get SIGURG (our handler stays installed: it
 * passes on what is not ours), and threads that registered themselves run
 * our TLS destructor when they exit. Without -z nodelete the dlclose()
 * unmapped the code all of that points to, and the process died of
 * SIGSEGV. Exits 0 when it survives; says whether the library stayed. */
#include <snapprof/snapprof.h>

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int (*p_register)(snapprof_thread_t **);
static void (*p_release)(snapprof_thread_t *);

static atomic_int g_stop;
static atomic_int g_ready;

static void *worker(void *arg)
{
    (void)arg;
    snapprof_thread_t *me;
    if (p_register(&me) != 0)
        abort();
    snapprof_thread_t **out = arg;
    *out = me;
    atomic_fetch_add(&g_ready, 1);
    volatile unsigned long x = 1;
    while (!atomic_load(&g_stop))
        for (int i = 0; i < 10000; i++)
            x = x * 6364136223846793005u + 1;
    return NULL; /* the registered thread's TLS destructor runs here */
}

static void *short_thread(void *arg)
{
    (void)arg;
    raise(SIGURG);
    return NULL;
}

#define SYM(h, name)                                                                               \
    ({                                                                                             \
        void *s_ = dlsym(h, name);                                                                 \
        if (!s_) {                                                                                 \
            fprintf(stderr, "no %s: %s\n", name, dlerror());                                       \
            return 1;                                                                              \
        }                                                                                          \
        s_;                                                                                        \
    })

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s LIBSNAPPROF.so\n", argv[0]);
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    p_register = SYM(h, "snapprof_thread_register");
    p_release = SYM(h, "snapprof_thread_release");
    void (*p_params_init)(snapprof_params_t *, size_t) = SYM(h, "snapprof_params_init_sized");
    int (*p_create)(const snapprof_params_t *, snapprof_thread_t *const *, size_t,
                    snapprof_profiler_t **) = SYM(h, "snapprof_profiler_create");
    int (*p_start)(snapprof_profiler_t *) = SYM(h, "snapprof_profiler_start");
    int (*p_stop)(snapprof_profiler_t *) = SYM(h, "snapprof_profiler_stop");
    void (*p_destroy)(snapprof_profiler_t *) = SYM(h, "snapprof_profiler_destroy");

    pthread_t th[2];
    snapprof_thread_t *tok[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        if (pthread_create(&th[i], NULL, worker, &tok[i]) != 0)
            return 1;
    while (atomic_load(&g_ready) < 2)
        usleep(1000);
    snapprof_params_t params;
    p_params_init(&params, sizeof params);
    params.interval_ns = 1000000u;
    snapprof_profiler_t *p;
    if (p_create(&params, tok, 2, &p) != 0 || p_start(p) != 0)
        return 1;
    usleep(100000);
    if (p_stop(p) != 0)
        return 1;
    p_destroy(p);
    dlclose(h);
    void *still = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
    printf("after dlclose the library is %s\n", still ? "still loaded" : "unloaded");
    if (still)
        dlclose(still);

    /* Signals to threads that live on, and threads that come and go. */
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 2; i++)
            pthread_kill(th[i], SIGURG);
        pthread_t s;
        if (pthread_create(&s, NULL, short_thread, NULL) != 0)
            return 1;
        pthread_join(s, NULL);
        usleep(1000);
    }
    atomic_store(&g_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    printf("survived: 40 signals, 20 short threads, 2 registered threads exited\n");
    return 0;
}
