/* The POSIX CPU-time timer trigger: timer_create on the thread's CPU clock
 * with SIGEV_THREAD_ID, so the thread itself gets the signal when its CPU
 * time crosses each period (what Go's runtime has done since 1.18 and
 * async-profiler calls ctimer). The kernel checks CPU timers at the
 * scheduler tick, so the rate is capped at CONFIG_HZ (250 Hz here) and a
 * signal stands for 1 + si_overrun periods. The first expiry is spread
 * over one period, so threads that start together do not fire together. */
#include "trigger/trigger.h"

#include "common/fault.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static clockid_t thread_clock(pid_t tid)
{
    /* As glibc's pthread_getcpuclockid: ~tid << 3 | PERTHREAD | SCHED. */
    return (clockid_t)(((unsigned int)~tid << 3) | 4u | 2u);
}

static int timer_create_arm(snapprof__arm_t *arm, int signo, uint64_t period_ns)
{
    (void)period_ns;
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = signo;
    sev.sigev_value.sival_ptr = (void *)(uintptr_t)snapprof__trigger_timer_payload(arm);
    sev._sigev_un._tid = arm->target->tid;
    if (snapprof__fault(SNAPPROF__FAULT_TIMER_CREATE))
        return -EAGAIN; /* as the kernel says when timers run out */
    if (timer_create(thread_clock(arm->target->tid), &sev, &arm->timer) != 0)
        return -errno;
    arm->has_timer = 1;
    return 0;
}

static int timer_start(snapprof__arm_t *arm, uint64_t period_ns)
{
    /* A first expiry somewhere in the first period (golang/go#35057). */
    uint64_t first = 1 + ((uint64_t)arm->target->tid * 2654435761u) % period_ns;
    arm->first_period_ns = first; /* the first signal stands for this much */
    struct itimerspec its = {
        .it_interval = {(time_t)(period_ns / 1000000000u), (long)(period_ns % 1000000000u)},
        .it_value = {(time_t)(first / 1000000000u), (long)(first % 1000000000u)},
    };
    return timer_settime(arm->timer, 0, &its, NULL) == 0 ? 0 : -errno;
}

static int timer_read_cpu(snapprof__arm_t *arm, uint64_t *ns)
{
    struct timespec ts;
    if (clock_gettime(thread_clock(arm->target->tid), &ts) != 0)
        return -errno;
    *ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    return 0;
}

static void timer_destroy(snapprof__arm_t *arm)
{
    if (arm->has_timer)
        timer_delete(arm->timer);
    arm->has_timer = 0;
}

const snapprof__trigger_ops_t snapprof__trigger_cpu_timer = {
    .version = 1,
    .kind = SNAPPROF_TRIGGER_CPU_TIMER,
    .xCreate = timer_create_arm,
    .xStart = timer_start,
    .xRearm = NULL,
    .xReadCpu = timer_read_cpu,
    .xDestroy = timer_destroy,
};
