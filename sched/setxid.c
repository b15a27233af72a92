/*
 * setuid, setgid, setgroups and the other set*id calls in a threaded
 * program: Linux credentials are per OS thread, so glibc (nptl_setxid.c)
 * marks every thread it knows in its descriptor, signals each with
 * SIGSETXID, and waits until every mark is cleared; each thread's handler
 * makes the call on its own thread and clears the mark of THREAD_SELF, the
 * descriptor its FS base points to.
 *
 * On an M that runs a G, the FS base is the G's TCB, not the M's own
 * descriptor that glibc marked: the mark would never clear and glibc
 * would signal that M for ever (memcached, which calls setgroups at
 * start-up, would hang). So goshim puts its own handler in front of glibc's: on
 * an M whose FS base is not its real descriptor (real_tcb), it switches
 * to it for glibc's handler and back. The M is told by its GS base (0 on
 * threads goshim does not run). SIGSETXID must never be blocked, so
 * neither the helper threads nor any G block it (sched_helper_thread,
 * shim/sigroute.c).
 */
#include <asm/prctl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>

#include "sched.h"
#include "throw.h"

#define SIGSETXID_NO 33

/* The kernel's struct sigaction on x86-64. */
struct ksigaction {
    void (*handler)(int, siginfo_t *, void *);
    unsigned long flags;
    void (*restorer)(void);
    uint64_t mask;
};

static struct ksigaction glibc_setxid;

static void on_setxid(int sig, siginfo_t *si, void *uc)
{
    unsigned long gs = 0, fs = 0;
    rt_syscall(SYS_arch_prctl, ARCH_GET_GS, &gs, 0);
    struct m *mp = (struct m *)gs;
    if (mp && rt_syscall(SYS_arch_prctl, ARCH_GET_FS, &fs, 0) == 0 && mp->real_tcb &&
        (void *)fs != mp->real_tcb) {
        __atomic_add_fetch(&m_on_real_tcb, 1, __ATOMIC_SEQ_CST);
        ctx_setfs(mp->real_tcb);
        glibc_setxid.handler(sig, si, uc);
        ctx_setfs((void *)fs);
        __atomic_sub_fetch(&m_on_real_tcb, 1, __ATOMIC_SEQ_CST);
        return;
    }
    glibc_setxid.handler(sig, si, uc);
}

void setxid_init(void)
{
    struct ksigaction act;
    if (rt_syscall6(SYS_rt_sigaction, SIGSETXID_NO, 0, (long)&glibc_setxid, 8, 0, 0) != 0 ||
        !(glibc_setxid.flags & SA_SIGINFO) || (uintptr_t)glibc_setxid.handler < 2)
        return; /* glibc has not installed its handler: nothing to stand in front of */
    act = glibc_setxid;
    act.handler = on_setxid;
    if (rt_syscall6(SYS_rt_sigaction, SIGSETXID_NO, (long)&act, 0, 8, 0, 0) != 0)
        rt_print(2, "goshim: cannot install the set*id signal handler: setuid and friends may "
                    "hang in threaded programs\n");
}
