/*
 * Programs goshim must leave alone (preload/detect.c): it stays off, says
 * so in one line on stderr, and the program runs natively.
 *
 * prog_clone_thread makes a thread with clone(CLONE_VM | CLONE_THREAD ...),
 * not pthread_create, and waits for it to end (CLONE_CHILD_CLEARTID).
 * Output: "clone thread ran: 42"; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile int result;

static int clone_fn(void *arg)
{
    result = (int)(intptr_t)arg; /* no libc: the thread shares main's TLS */
    return 0;
}

int main(void)
{
    size_t size = 256 * 1024;
    char *stack = malloc(size);
    pid_t ptid = 0, ctid = 1; /* CLONE_CHILD_CLEARTID zeroes ctid and wakes us at the end */
    int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
                CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
    if (!stack || clone(clone_fn, stack + size, flags, (void *)42, &ptid, NULL, &ctid) < 0) {
        perror("clone");
        return 1;
    }
    int v;
    while ((v = __atomic_load_n(&ctid, __ATOMIC_ACQUIRE)) != 0)
        syscall(SYS_futex, &ctid, FUTEX_WAIT, v, NULL, NULL, 0);
    printf("clone thread ran: %d\n", result);
    return 0;
}
