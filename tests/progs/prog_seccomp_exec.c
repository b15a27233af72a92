/*
 * prog_seccomp_exec ERR PROG [ARGS...]: run build/tests/progs/PROG (next
 * to this program) with modify_ldt refused by a seccomp filter: ERR is
 * EPERM (as a container profile) or ENOSYS (as a kernel built without
 * CONFIG_MODIFY_LDT_SYSCALL). LD_PRELOAD and the environment pass on.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "EPERM") && strcmp(argv[1], "ENOSYS"))) {
        fprintf(stderr, "usage: %s EPERM|ENOSYS PROG [ARGS...]\n", argv[0]);
        return 2;
    }
    int err = strcmp(argv[1], "EPERM") == 0 ? EPERM : ENOSYS;
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_modify_ldt, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned)err),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("prog_seccomp_exec: seccomp");
        return 2;
    }
    char path[4096];
    const char *slash = strrchr(argv[0], '/');
    snprintf(path, sizeof path, "%.*s%s", slash ? (int)(slash - argv[0] + 1) : 0, argv[0], argv[2]);
    argv[2] = path;
    execv(path, argv + 2);
    perror("prog_seccomp_exec: exec");
    return 127;
}
