/* Runs a program under a seccomp filter, as systemd's SystemCallFilter=
 * does: the filter is installed first, then the program is exec'd, so the
 * preload library starts in a process that already has it.
 *
 *   seccomp_exec kill|trap|errno CALL[,CALL...] PROGRAM [ARG...]
 *
 * CALL is perf_event_open or process_vm_readv; the action is what the
 * filter does to them (kill the process with SIGSYS, trap to SIGSYS, or
 * fail with EPERM); every other call is allowed. Linked statically, so
 * that LD_PRELOAD (snapprof record) does not load the profiler into this
 * program itself, only into the one it runs. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: seccomp_exec kill|trap|errno CALL[,CALL...] PROGRAM [ARG...]\n");
        return 2;
    }
    uint32_t action = !strcmp(argv[1], "kill")   ? SECCOMP_RET_KILL_PROCESS
                      : !strcmp(argv[1], "trap") ? SECCOMP_RET_TRAP
                                                 : SECCOMP_RET_ERRNO | EPERM;
    int nrs[2] = {-1, -1};
    char *save = NULL;
    int n = 0;
    for (char *c = strtok_r(argv[2], ",", &save); c && n < 2; c = strtok_r(NULL, ",", &save)) {
        if (!strcmp(c, "perf_event_open"))
            nrs[n++] = __NR_perf_event_open;
        else if (!strcmp(c, "process_vm_readv"))
            nrs[n++] = __NR_process_vm_readv;
        else {
            fprintf(stderr, "seccomp_exec: unknown call %s\n", c);
            return 2;
        }
    }
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nrs[0], 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nrs[1], 0, 1),
        BPF_STMT(BPF_RET | BPF_K, action),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
        perror("seccomp_exec: seccomp");
        return 2;
    }
    execvp(argv[3], argv + 3);
    perror("seccomp_exec: exec");
    return 127;
}
