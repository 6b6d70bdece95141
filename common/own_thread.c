/* The library's own threads (own_thread.h). */
#include "common/own_thread.h"

#include <pthread.h>
#include <signal.h>

int snapprof__own_thread_start(void *(*fn)(void *), void *arg, size_t stack_size, const char *name)
{
    /* The new thread inherits the mask in force at pthread_create(). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (stack_size)
        pthread_attr_setstacksize(&attr, stack_size);
    pthread_t th;
    int rc = pthread_create(&th, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        pthread_setname_np(th, name);
    return rc;
}
