/*
 * The router of process-directed signals: a thread of goshim's own that
 * lets through every signal with a handler (so one always takes it) and
 * hands each signal posted to it (by the dispatcher, shim/signal.c, when
 * the thread it interrupted is not the one the kernel would choose, or it
 * interrupted goshim's scheduler) to its thread, in ordinary thread
 * context, with locks (shim_route_signal): a thread running on another M
 * or blocked in a system call gets it by tgkill of that M, a parked one
 * has its wait interrupted and runs the handler on its own stack (EINTR or
 * restart per SA_RESTART). A signal no thread takes goes back to the
 * kernel, pending for the process, and is blocked in the router until a
 * thread unblocks it. kill(), sigqueue() and pidfd_send_signal() of the own
 * process post to it directly and return once the signal is handed on, as
 * the kernel's.
 */
#include <asm/prctl.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim/shim.h"
#include "shim/sigdeliver.h"
#include "shim/sigroute.h"

/* The router's state: the signals posted to it, in the order they came, with their
 * siginfo (a bounded queue that signal handlers on any thread fill: a slot is free for
 * position pos when its seq is pos, filled when it is pos + 1); a signal posted when the
 * queue is full waits in overflow (one of each, the last siginfo); and the router's
 * wake-up word, bumped by every post and every change of dispatched. */
enum { POSTQ = 256 };
static struct {
    uint64_t head, tail; /* head: producers (CAS); tail: the router */
    struct {
        uint64_t seq;
        int sig;
        siginfo_t info;
    } slot[POSTQ];
    uint64_t overflow;
    siginfo_t overflow_info[65];
    uint32_t word;
    uint32_t routing; /* the router is handing one on */
    /* Queue positions below handed are handed on (low 32 bits: a futex word for kill()
     * and sigqueue(), which wait for theirs); handed_waiters: how many wait. */
    uint32_t handed;
    uint32_t handed_waiters;
} rt GOSHIM_LARGE;

void sig_router_kick(void)
{
    __atomic_add_fetch(&rt.word, 1, __ATOMIC_SEQ_CST);
    futexwakeup(&rt.word, 1);
}

/* A slot's seq is kept less the slot's index (pos % POSTQ): the zeroed queue is the empty
 * one, every slot free for its first position, and no page of it (36 KB) is written at
 * start-up, where a first touch costs a process 12-16 us a page on some hosts. */
static uint64_t slot_seq(uint64_t pos)
{
    return __atomic_load_n(&rt.slot[pos % POSTQ].seq, __ATOMIC_ACQUIRE) + pos % POSTQ;
}

static void slot_seq_set(uint64_t pos, uint64_t seq)
{
    __atomic_store_n(&rt.slot[pos % POSTQ].seq, seq - pos % POSTQ, __ATOMIC_RELEASE);
}

/* Fork child: what the parent posted and its router had not taken is gone with it (the
 * kernel gives a child no pending signal); a slot a thread of the parent had claimed but
 * not filled counts as taken. The rest of the queue stays as it is: rewriting every slot
 * would copy the whole queue's pages from the parent. */
FORK_TEXT static void postq_fork_child(void)
{
    uint64_t head = rt.head;
    for (uint64_t pos = rt.tail; pos < head; pos++)
        slot_seq_set(pos, pos + POSTQ);
    FORK_SET(rt.tail, head);
    FORK_SET(rt.overflow, 0);
    FORK_SET(rt.handed, (uint32_t)head);
}

/* Signal-safe: queue sig for the router. Its position in the queue, or UINT64_MAX when it
 * went to the overflow set. */
uint64_t sig_post(int sig, const siginfo_t *info)
{
    return sig_post_kick(sig, info, true);
}

uint64_t sig_post_kick(int sig, const siginfo_t *info, bool kick)
{
    uint64_t pos = __atomic_load_n(&rt.head, __ATOMIC_RELAXED);
    for (;;) {
        uint64_t seq = slot_seq(pos);
        if (seq == pos) {
            if (__atomic_compare_exchange_n(&rt.head, &pos, pos + 1, true, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED))
                break;
        } else if (seq < pos) { /* full */
            rt.overflow_info[sig] = *info;
            __atomic_or_fetch(&rt.overflow, 1ULL << (sig - 1), __ATOMIC_SEQ_CST);
            sched_helpers_want();
            sig_router_kick(); /* only the router takes the overflow */
            return UINT64_MAX;
        } else {
            pos = __atomic_load_n(&rt.head, __ATOMIC_RELAXED);
        }
    }
    rt.slot[pos % POSTQ].sig = sig;
    rt.slot[pos % POSTQ].info = *info;
    slot_seq_set(pos, pos + 1);
    sched_helpers_want(); /* a fork child's router, if not started yet */
    if (kick)
        sig_router_kick();
    return pos;
}

/* The router: the signal at queue position at is handed on (to a thread, or the kernel). */
static void handed_on(uint64_t at)
{
    __atomic_store_n(&rt.handed, (uint32_t)(at + 1), __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&rt.handed_waiters, __ATOMIC_SEQ_CST))
        futexwakeup(&rt.handed, INT32_MAX);
}

/*
 * Wait until the router has handed on the signal posted at position at: a kill() of the
 * own process returns once the thread that takes the signal is marked (as the kernel's
 * kill returns with the signal queued and a thread chosen, which then cannot leave
 * without taking it). Bounded (the router may wait for a lock this thread holds, if it
 * is a signal handler): at most 100 ms (the router, a thread of its own, may wait a few
 * ms for a CPU on a loaded machine).
 */
static void wait_handed(uint64_t at)
{
    if (at == UINT64_MAX)
        return;
    int64_t until = nanotime() + 100000000;
    __atomic_add_fetch(&rt.handed_waiters, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        uint32_t h = __atomic_load_n(&rt.handed, __ATOMIC_SEQ_CST);
        if ((int32_t)(h - (uint32_t)(at + 1)) >= 0)
            break;
        int64_t left = until - nanotime();
        if (left <= 0)
            break;
        futexsleep(&rt.handed, h, left);
    }
    __atomic_sub_fetch(&rt.handed_waiters, 1, __ATOMIC_SEQ_CST);
}

/* The next posted signal, in order, left in the queue (consume_posted takes it); 0 if none
 * or if the next is in the overflow set. */
static int peek_posted(siginfo_t *info, uint64_t *at)
{
    uint64_t pos = rt.tail;
    *at = pos;
    if (slot_seq(pos) != pos + 1)
        return 0;
    *info = rt.slot[pos % POSTQ].info;
    return rt.slot[pos % POSTQ].sig;
}

static void consume_posted(uint64_t pos)
{
    slot_seq_set(pos, pos + POSTQ);
    __atomic_store_n(&rt.tail, pos + 1, __ATOMIC_SEQ_CST);
}

/* The router: the next posted signal, in order; 0 if none. */
static int take_posted(siginfo_t *info, uint64_t *at)
{
    int sig = peek_posted(info, at);
    if (sig) {
        consume_posted(*at);
        return sig;
    }
    uint64_t o = __atomic_load_n(&rt.overflow, __ATOMIC_SEQ_CST);
    if (o) {
        sig = __builtin_ctzll(o) + 1;
        *at = UINT64_MAX;
        *info = rt.overflow_info[sig];
        __atomic_and_fetch(&rt.overflow, ~(1ULL << (sig - 1)), __ATOMIC_SEQ_CST);
        return sig;
    }
    return 0;
}

/* Whether the router (or an M in its stead) is handing signals on: then nobody else may. */
static bool routing_claim(void)
{
    uint32_t idle = 0;
    return __atomic_compare_exchange_n(&rt.routing, &idle, 1, false, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST);
}

/*
 * An M's share of the router's work (sched_hooks.route_posted). A process signal that lands
 * on an M between two threads (goshim's scheduler runs there) is posted to the router, a
 * thread of its own, whose wake-up and the wake-up of the thread it hands the signal to
 * cost two passes through the kernel's scheduler where the kernel's own delivery costs
 * none: a POSIX timer's signals reached their handler at half the kernel's rate. The M
 * that got it is about to look for work anyway: it hands on what it can itself, a parked
 * thread it readies lands on its own P. What it leaves (no thread takes the signal: back to
 * the kernel, which only the router does; the overflow set) goes on to the router, woken
 * here (a post the router was kicked for waits for the claim meanwhile).
 */
void sig_route_posted(bool here)
{
    if (!here) {
        if (sig_router_busy())
            sig_router_kick();
        return;
    }
    if (__atomic_load_n(&rt.head, __ATOMIC_SEQ_CST) ==
            __atomic_load_n(&rt.tail, __ATOMIC_SEQ_CST) ||
        !routing_claim())
        return;
    siginfo_t si;
    uint64_t at;
    int sig;
    while ((sig = peek_posted(&si, &at)) != 0) {
        if (si.si_code == SHIM_SI_BELL && si.si_pid == sig_self_pid)
            shim_recheck_signal(sig, &si);
        else if ((__atomic_load_n(&sig_parked, __ATOMIC_SEQ_CST) & (1ULL << (sig - 1))) ||
                 !shim_route_signal(sig, &si))
            break;
        consume_posted(at);
        handed_on(at);
    }
    __atomic_store_n(&rt.routing, 0, __ATOMIC_SEQ_CST);
    if (sig_router_busy())
        sig_router_kick(); /* what is left, and whatever came meanwhile */
}

/*
 * Give sig back to the kernel, pending for the process, with its siginfo. The kernel lets
 * a thread other than the main one queue a signal to its process only with a negative
 * si_code (rt_sigqueueinfo: "nor can they impersonate a kill()"; else EPERM, and a kill()
 * nobody takes at once would be lost): the siginfo goes with goshim's code, the sender's
 * in si_errno, and sig_unparked() puts it back where the signal is taken.
 */
void sig_park_in_kernel(int sig, const siginfo_t *info)
{
    siginfo_t q = *info;
    q.si_errno = info->si_code;
    q.si_code = SHIM_SI_PARKED;
    long rc = rt_syscall(SYS_rt_sigqueueinfo, sig_self_pid, sig, &q);
    if (rc < 0)
        rt_print(2,
                 "goshim: cannot leave signal %d pending for the process (error %ld): it is "
                 "lost\n",
                 sig, -rc);
}

/* A signal taken from the kernel: its own siginfo if the router parked it. */
const siginfo_t *sig_unparked(const siginfo_t *info, siginfo_t *copy)
{
    if (info->si_code != SHIM_SI_PARKED)
        return info;
    *copy = *info;
    copy->si_code = info->si_errno;
    copy->si_errno = 0;
    return copy;
}

/* The router: takes the signals posted to it and hands each to its thread. Lets through
 * every signal that has a handler (none other: a default action would be the kernel's). */
static void *router_main(void *arg)
{
    (void)arg;
    sig_on_router = true;
    /* A new thread inherits its creator's GS base, here an M's: this is no M (setxid.c and
     * the dispatcher tell Ms by it). */
    rt_syscall(SYS_arch_prctl, ARCH_SET_GS, 0, 0);
    uint64_t applied = 0, mask = 0;
    bool first = true;
    for (;;) {
        uint32_t w = __atomic_load_n(&rt.word, __ATOMIC_SEQ_CST);
        uint64_t want = __atomic_load_n(&sig_dispatched, __ATOMIC_SEQ_CST) &
                        ~__atomic_load_n(&sig_parked, __ATOMIC_SEQ_CST);
        if (first || want != applied) {
            /* glibc's SIGCANCEL and SIGSETXID stay open on every thread (setxid.c). */
            mask = ~want & ~((1ULL << (SIGCANCEL_NO - 1)) | (1ULL << (SIGSETXID_NO - 1)));
            rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&mask, 0, 8, 0, 0);
            applied = want;
            first = false;
        }
        siginfo_t si;
        int sig, n = 0;
        uint64_t at;
        if (!routing_claim()) { /* an M hands them on (sig_route_posted): it kicks when done */
            futexsleep(&rt.word, w, -1);
            continue;
        }
        while ((sig = take_posted(&si, &at)) != 0) {
            n++;
            uint64_t bit = 1ULL << (sig - 1);
            if (si.si_code == SHIM_SI_BELL && si.si_pid == sig_self_pid) {
                shim_recheck_signal(sig, &si);
            } else if (preempt_owns(sig)) {
                if (!shim_route_signal(sig, &si)) /* never blocked: cannot wait in the kernel */
                    shim_pend_on_main(sig, &si);
            } else if ((__atomic_load_n(&sig_parked, __ATOMIC_SEQ_CST) & bit) ||
                       !shim_route_signal(sig, &si)) {
                /* Nobody takes it: blocked here first, then back to the kernel for the
                 * process, with its siginfo, behind the ones of it that came before. */
                if (!(__atomic_fetch_or(&sig_parked, bit, __ATOMIC_SEQ_CST) & bit)) {
                    mask |= bit;
                    applied &= ~bit;
                    rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&mask, 0, 8, 0, 0);
                    sched_idle_block(bit); /* idle Ms no longer let it through either */
                }
                sig_park_in_kernel(sig, &si);
            }
            if (at != UINT64_MAX)
                handed_on(at);
        }
        __atomic_store_n(&rt.routing, 0, __ATOMIC_SEQ_CST);
        if (!n)
            futexsleep(&rt.word, w, -1);
    }
    return NULL;
}

void shim_signal_repost(int sig, const siginfo_t *info)
{
    sig_post(sig, info);
}

/* A signal this process sends itself, to be routed here: one with a handler of the program
 * (the others are the kernel's), none of it left pending for the process before (they come
 * first), and a sender that is a thread of the program. */
static bool route_own(pid_t pid, int sig)
{
    /* A fork child of one thread without its router yet: the kernel's kill reaches the one
     * thread there is, which its dispatcher serves (sched_helper_defer). */
    if (pid != sig_self_pid || sig <= 0 || sig >= 65 || !goshim_active() ||
        sched_helpers_deferred())
        return false;
    uint64_t bit = 1ULL << (sig - 1);
    return (__atomic_load_n(&sig_dispatched, __ATOMIC_SEQ_CST) & bit) &&
           !(__atomic_load_n(&sig_parked, __ATOMIC_SEQ_CST) & bit);
}

/* kill() and sigqueue() of the own process: the siginfo the kernel would give, posted to
 * the router, which has handed it on when the call returns (see wait_handed). */
static int send_own(int sig, int code, union sigval value)
{
    siginfo_t si;
    shim_own_info(&si, sig, code);
    si.si_value = value;
    /* Nothing before it with the router: routed here at once if the locks are free (a
     * handler may have interrupted their holder). Else the router's, waited for. */
    if (sig_router_busy() || shim_route_signal_now(sig, &si) != 1) {
        struct m *mp = acquirem(); /* no hand-off of its P while it waits a moment */
        wait_handed(sig_post(sig, &si));
        releasem(mp);
    }
    shim_deliver_signals(); /* routed to the sender itself: handled before the call returns */
    return 0;
}

GOSHIM_EXPORT int kill(pid_t pid, int sig)
{
    pid = shim_kill_pid(pid);
    if (!route_own(pid, sig))
        return REAL(kill)(pid, sig);
    return send_own(sig, SI_USER, (union sigval){0});
}

GOSHIM_EXPORT int sigqueue(pid_t pid, int sig, const union sigval value)
{
    pid = shim_kill_pid(pid);
    if (!route_own(pid, sig))
        return REAL(sigqueue)(pid, sig, value);
    return send_own(sig, SI_QUEUE, value);
}

/* Whether pidfd names this process: a pidfd of it (its fdinfo's Pid line) or its /proc
 * directory, which the kernel takes as well. */
static bool pidfd_is_self(int pidfd)
{
    struct stat fs, self;
    if (rt_syscall(SYS_fstat, pidfd, &fs, 0) != 0)
        return false;
    if (S_ISDIR(fs.st_mode))
        return rt_syscall6(SYS_newfstatat, AT_FDCWD, (long)"/proc/self", (long)&self, 0, 0, 0) ==
                   0 &&
               fs.st_dev == self.st_dev && fs.st_ino == self.st_ino;
    char path[64], buf[512];
    rt_snprint(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
    if (rt_read_text(path, buf, sizeof buf) < 0)
        return false;
    const char *p = strstr(buf, "\nPid:\t");
    return p && atol(p + 6) == sig_self_pid;
}

/*
 * pidfd_send_signal to the own process with neither siginfo nor flags (glibc's, and the
 * system call made with syscall(), as CPython makes it): as kill(). The kernel's left the
 * signal to whichever OS thread it picked (the router, when the main thread had moved off
 * the first one, which then blocked the signal as idle), and the handler ran after the
 * call had returned, where the program expects it to have run.
 */
GOSHIM_EXPORT int pidfd_send_signal(int pidfd, int sig, siginfo_t *info, unsigned int flags)
{
    if (info || flags || !route_own(sig_self_pid, sig) || !pidfd_is_self(pidfd)) {
        long r = rt_syscall6(SYS_pidfd_send_signal, pidfd, sig, (long)info, flags, 0, 0);
        if (r < 0) {
            errno = (int)-r;
            return -1;
        }
        return 0;
    }
    return send_own(sig, SI_USER, (union sigval){0});
}

/* Signals posted to the router that it has not handed on yet. */
bool sig_router_busy(void)
{
    return __atomic_load_n(&rt.head, __ATOMIC_SEQ_CST) !=
               __atomic_load_n(&rt.tail, __ATOMIC_SEQ_CST) ||
           __atomic_load_n(&rt.overflow, __ATOMIC_SEQ_CST) ||
           __atomic_load_n(&rt.routing, __ATOMIC_SEQ_CST);
}

/* The router's start: with the first routed signal (sched_helper_for_signals), or a fork
 * child's. */
static int router_start(void)
{
    int err = sched_helper_thread(router_main);
    if (err)
        rt_print(2,
                 "goshim: cannot start the signal router (error %d): signals sent to the "
                 "process may reach a thread late\n",
                 err);
    return err;
}

FORK_TEXT static void router_fork_child(void)
{
    sig_act_fork_child();
    pid_t pid = goshim_started ? sched_fork_pid() : 0; /* not 0: a G forked it */
    if (!pid)
        return;
    sig_self_pid = pid;
    postq_fork_child();
    /* (rt.word stays: the router reads it before each wait.) */
    FORK_SET(rt.handed_waiters, 0);
    FORK_SET(sig_parked, 0);
    if (!sched_signal_helpers_lazy() && !sched_helper_defer(router_start))
        router_start(); /* (lazy: made with the first routed signal, as in the parent) */
}

/* A fork child's router started by a signal posted to it while it was absent: what was posted
 * is handed on before the caller looks at its signal state, as the kernel's would be. */
void sig_router_settle(void)
{
    if (!sched_helpers_check())
        return;
    uint64_t head = __atomic_load_n(&rt.head, __ATOMIC_SEQ_CST);
    if (head > 0)
        wait_handed(head - 1);
}

int shim_signal_atfork(void)
{
    static bool done;
    return sched_atfork_once(&done, NULL, NULL, router_fork_child);
}

int shim_signal_init(void)
{
    sig_self_pid = getpid();
    int err = sched_helper_for_signals(router_start) ? 0 : sched_helper_thread(router_main);
    if (err == 0)
        err = shim_signal_atfork();
    return err;
}
