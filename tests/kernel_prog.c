/* A program for the kernel-time and privilege-drop tests to profile: it
 * knows nothing of snapprof (it is run under `snapprof record`).
 *
 *   dropworkers MS   as root: forks 2 workers that setgid/setuid to nobody
 *                    (65534), as a server's workers do, then each does MS ms
 *                    of work in sys_heavy (cheap system calls) and
 *                    user_heavy (user-space arithmetic) and exit()s; prints
 *                    "workers PID PID" and waits for them
 *   syscalls MS      MS ms of work in sys_heavy, then MS ms in user_heavy
 *
 * Work, not time: fixed iteration counts, so a loaded machine only makes
 * them slower. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define USER_ITERS_PER_MS 300000u
/* write(2) of one byte to /dev/null: about 0.5-1 us each on these VMs,
 * most of it in the kernel. */
#define SYS_ITERS_PER_MS 1000u

__attribute__((noinline)) void user_heavy(uint64_t ms)
{
    volatile uint64_t x = 1;
    for (uint64_t i = 0; i < ms * USER_ITERS_PER_MS; i++)
        x = x * 6364136223846793005u + 1442695040888963407u;
}

__attribute__((noinline)) void sys_heavy(uint64_t ms)
{
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        exit(3);
    char c = 'x';
    for (uint64_t i = 0; i < ms * SYS_ITERS_PER_MS; i++)
        if (write(fd, &c, 1) != 1)
            exit(3);
    close(fd);
}

static int mode_dropworkers(uint64_t ms)
{
    pid_t w[2];
    for (int i = 0; i < 2; i++) {
        fflush(stdout);
        w[i] = fork();
        if (w[i] < 0)
            return 2;
        if (w[i] == 0) {
            if (setgid(65534) != 0 || setuid(65534) != 0) {
                perror("setuid");
                exit(4);
            }
            sys_heavy(ms);
            user_heavy(ms);
            exit(0);
        }
    }
    printf("workers %d %d\n", (int)w[0], (int)w[1]);
    fflush(stdout);
    user_heavy(ms / 4);
    int bad = 0;
    for (int i = 0; i < 2; i++) {
        int st;
        if (waitpid(w[i], &st, 0) != w[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad = 1;
    }
    return bad ? 5 : 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    uint64_t ms = argc > 2 ? strtoull(argv[2], NULL, 10) : 300;
    if (!strcmp(mode, "dropworkers"))
        return mode_dropworkers(ms);
    if (!strcmp(mode, "syscalls")) {
        sys_heavy(ms);
        user_heavy(ms);
        return 0;
    }
    fprintf(stderr, "usage: %s dropworkers|syscalls MS\n", argv[0]);
    return 2;
}
