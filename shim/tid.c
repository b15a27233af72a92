/*
 * Thread ids, and the per-thread kernel settings a G cannot have.
 *
 * Ids. Each thread has its own id, what gettid() and syscall(SYS_gettid)
 * say: in full TLS mode the tid field of its TCB, which glibc (and so
 * goshim's mutexes) already uses as the owner id of recursive, errorcheck
 * and the loader's locks, so a lock's __owner reads as its owner's
 * gettid() as natively. The main thread's TCB is glibc's own: its id is
 * the pid, and gettid() == getpid() holds on it (in a fork child, the
 * forking thread's id is the child's pid: sched/fork.c). In errno mode the
 * Gs share their M's TCB and the record keeps an id from the same
 * sequence. The other ids lie above PID_MAX_LIMIT (2^22; from 2^24 up,
 * sched/tls.c), where the kernel never gives one: no id of a G is the tid
 * of another process or of one of goshim's OS threads, so a call given one
 * cannot be meant for them, and a tool outside the process given one (kill,
 * taskset -p, renice, /proc/TID) fails with ESRCH or ENOENT instead of
 * acting on an unrelated process. A program that packs tids in 22 bits
 * would lose the high bits; 30 (FUTEX_TID_MASK) hold them.
 *
 * Rejected: ids below pid_max (small like the kernel's): they would alias
 * live kernel tids, and a G's setaffinity, setpriority or kill by tid
 * could not be told from the same call for another process; and they would
 * differ from the lock owner ids glibc reads from the TCB.
 *
 * The calls that take a tid (tgkill, tkill, sched_{set,get}affinity,
 * sched_{set,get}scheduler, sched_{set,get}param, sched_rr_get_interval,
 * {set,get}priority with PRIO_PROCESS, all also through syscall(), and
 * nice(), whose own calls of those are glibc's internal ones): given the
 * tid of a live G, or 0 on a G, they act on that G's thread. tgkill and
 * tkill deliver the signal to it as pthread_kill does (shim/sigdeliver.c);
 * the settings are those pthread_setaffinity_np and pthread_setschedparam
 * keep (below). The main thread's settings are its own OS thread's, the
 * pid's, as glibc's pthread calls make them (its 0 becomes the pid). kill
 * and sigqueue given a G's tid signal the process, as the kernel's do
 * given a thread's (shim/sigroute.c). Any other tid goes to the kernel:
 * another process's, one of goshim's OS threads, and one no thread has,
 * such as a G's that has ended (ESRCH, as natively). The main thread's tid
 * once it has ended (pthread_exit) takes signals and runs none, as the
 * kernel's exited leader does, instead of reaching the OS thread with its
 * number. /proc/self/task/TID cannot follow: the kernel's tasks are the Ms
 * (sched_setattr, ioprio_set and the like by syscall() go to the kernel
 * too). Finding a G by its tid is a walk of the live Gs (sthread_lock and
 * allglock held); the caller's own tid, and tids below PID_MAX_LIMIT other
 * than the pid, need none.
 *
 * Settings: CPU affinity, scheduling policy and priority, nice value. A G
 * has no kernel thread of its own, so they are accepted, checked as the
 * kernel would (values, and the permission checks of a thread without
 * CAP_SYS_NICE: EPERM for a real-time policy past RLIMIT_RTPRIO, EACCES
 * for a nice value under RLIMIT_NICE's floor), kept in the thread's record
 * and reported back; they are not enforced (README, Limits). A thread that
 * set no affinity or nice value reports its asker's OS thread's.
 */
#include <errno.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim/shim.h"
#include "shim/sigdeliver.h"
#include "shim/thread.h"

/* No kernel tid reaches it (include/linux/threads.h); the Gs' ids lie above. */
#define PID_MAX_LIMIT (1 << 22)

/* ---- ids ---------------------------------------------------------------------- */

pid_t sthread_tid(struct sthread *st)
{
    if (tls_full())
        return st->tcb ? (pid_t)tls_tcb_tid(st->tcb) : 0;
    return st->tid;
}

/* The calling thread's id (lock-free: signal handlers ask too). */
static pid_t tid_self(void)
{
    struct sthread *st = goshim_on ? sthread_self() : NULL;
    return st ? sthread_tid(st) : (pid_t)rt_syscall(SYS_gettid, 0, 0, 0);
}

GOSHIM_EXPORT pid_t gettid(void)
{
    return tid_self();
}

struct tid_pick {
    pid_t tid;
    struct sthread *st;
};

/* sched_g_find's match: gp runs the thread whose id is pick->tid. */
static bool has_tid(struct g *gp, void *arg)
{
    struct tid_pick *pick = arg;
    struct sthread *st = sthread_of_g(gp);
    if (!st || sthread_tid(st) != pick->tid)
        return false;
    pick->st = st;
    return true;
}

/*
 * The live thread whose id is tid (0: the caller's own thread), or NULL. A
 * thread other than the caller's is found, and stays, with sthread_lock
 * held: *locked, for done().
 */
static struct sthread *find(pid_t tid, bool *locked)
{
    *locked = false;
    if (!goshim_on || tid < 0)
        return NULL;
    struct sthread *self = sthread_self();
    if (tid == 0 || (self && tid == sthread_tid(self)))
        return self;
    if (tid < PID_MAX_LIMIT && tid != getpid())
        return NULL; /* a kernel tid: no G has it */
    struct tid_pick pick = {.tid = tid};
    bool busy;
    runtime_lock(&sthread_lock);
    sched_g_find(has_tid, &pick, false, &busy);
    if (pick.st)
        *locked = true;
    else
        runtime_unlock(&sthread_lock);
    return pick.st;
}

static void done(bool locked)
{
    if (locked)
        runtime_unlock(&sthread_lock);
}

/*
 * The G whose settings a call given tid reads or writes, found as find()
 * finds it; NULL when the kernel's answer is the one: then *ktid is the tid
 * to give the kernel (the main thread's 0 is its pid: its settings are its
 * own OS thread's, as for glibc's pthread calls).
 */
static struct sthread *settings_of(pid_t tid, pid_t *ktid, bool *locked)
{
    *ktid = tid;
    struct sthread *st = find(tid, locked);
    if (st && st->is_main) {
        *ktid = getpid();
        done(*locked);
        *locked = false;
        return NULL;
    }
    return st;
}

/* tgkill, and tkill (nr; tgid is then ours): the kernel's answer, 0 or -errno. */
static long kill_tid(long nr, pid_t tgid, pid_t tid, int sig)
{
    pid_t me = getpid();
    if (tid > 0 && (nr == SYS_tkill || tgid == me)) {
        bool locked;
        struct sthread *st = find(tid, &locked);
        int err = -1;
        if (st)
            err = sthread_kill(st, sig);
        else if (tid == me && goshim_on) /* the main thread has ended */
            err = sig < 0 || sig >= 65 ? EINVAL : 0;
        done(locked);
        if (err >= 0)
            return -err;
    }
    if (nr == SYS_tkill)
        return rt_syscall(SYS_tkill, tid, sig, 0);
    return rt_syscall(SYS_tgkill, tgid, tid, sig);
}

GOSHIM_EXPORT int tgkill(pid_t tgid, pid_t tid, int sig)
{
    long r = kill_tid(SYS_tgkill, tgid, tid, sig);
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return 0;
}

/* ---- affinity ----------------------------------------------------------------- */

/* st's affinity into set, as the system call answers: the bytes written (the kernel's mask
 * size), or -errno (EINVAL: size is shorter than that mask or not a multiple of a word). */
static long getaffinity_of(struct sthread *st, size_t size, cpu_set_t *set)
{
    long n = rt_syscall(SYS_sched_getaffinity, 0, size, set); /* checks size; the default */
    if (n <= 0)
        return n;
    runtime_lock(&st->lock);
    if (st->affinity) {
        memset(set, 0, (size_t)n);
        memcpy(set, st->affinity, (size_t)n < sizeof(cpu_set_t) ? (size_t)n : sizeof(cpu_set_t));
    }
    runtime_unlock(&st->lock);
    return n;
}

/* Set st's affinity: 0, or EINVAL when no CPU of set may run it, ENOMEM. */
static int setaffinity_of(struct sthread *st, size_t size, const cpu_set_t *set)
{
    cpu_set_t allowed, want;
    CPU_ZERO(&want);
    memcpy(&want, set, size < sizeof want ? size : sizeof want);
    CPU_ZERO(&allowed);
    long n = rt_syscall(SYS_sched_getaffinity, 0, sizeof allowed, &allowed);
    if (n < 0)
        return (int)-n;
    CPU_AND(&allowed, &allowed, &want);
    if (CPU_COUNT(&allowed) == 0)
        return EINVAL; /* as the kernel: no usable CPU in the mask */
    cpu_set_t *fresh = malloc(sizeof *fresh);
    runtime_lock(&st->lock);
    if (!st->affinity) {
        st->affinity = fresh;
        fresh = NULL;
    }
    if (st->affinity)
        *st->affinity = want;
    bool stored = st->affinity != NULL;
    runtime_unlock(&st->lock);
    free(fresh);
    return stored ? 0 : ENOMEM;
}

GOSHIM_EXPORT int pthread_getaffinity_np(pthread_t t, size_t size, cpu_set_t *set)
{
    STHREAD_OR_GLIBC(st, t, pthread_getaffinity_np, size, set);
    long n = getaffinity_of(st, size, set);
    if (n < 0)
        return (int)-n;
    memset((char *)set + n, 0, size - (size_t)n);
    return 0;
}

GOSHIM_EXPORT int pthread_setaffinity_np(pthread_t t, size_t size, const cpu_set_t *set)
{
    STHREAD_OR_GLIBC(st, t, pthread_setaffinity_np, size, set);
    return setaffinity_of(st, size, set);
}

/* sched_getaffinity and sched_setaffinity by tid: the kernel's answer (bytes, 0, -errno). */
static long affinity_tid(long nr, pid_t tid, size_t size, void *set)
{
    pid_t ktid;
    bool locked;
    struct sthread *st = settings_of(tid, &ktid, &locked);
    long r;
    if (!st)
        r = rt_syscall(nr, ktid, size, set);
    else if (nr == SYS_sched_getaffinity)
        r = getaffinity_of(st, size, set);
    else
        r = -setaffinity_of(st, size, set);
    done(locked);
    return r;
}

GOSHIM_EXPORT int sched_getaffinity(pid_t tid, size_t size, cpu_set_t *set)
{
    size_t len = size < INT32_MAX ? size : INT32_MAX;
    long n = affinity_tid(SYS_sched_getaffinity, tid, len, set);
    if (n < 0) {
        errno = (int)-n;
        return -1;
    }
    memset((char *)set + n, 0, size - (size_t)n); /* as glibc's */
    return 0;
}

GOSHIM_EXPORT int sched_setaffinity(pid_t tid, size_t size, const cpu_set_t *set)
{
    long r = affinity_tid(SYS_sched_setaffinity, tid, size, (void *)set);
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return 0;
}

/* ---- permissions (kernel/sched/syscalls.c, kernel/sys.c) ------------------------ */

/* The calling OS thread has CAP_SYS_NICE (effective). */
static bool cap_sys_nice(void)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    if (rt_syscall(SYS_capget, &hdr, data, 0) != 0)
        return false;
    return data[CAP_TO_INDEX(CAP_SYS_NICE)].effective & CAP_TO_MASK(CAP_SYS_NICE);
}

static rlim_t rlimit_cur(int resource)
{
    struct rlimit rl;
    return getrlimit(resource, &rl) == 0 ? rl.rlim_cur : 0;
}

/* The kernel's can_nice: may a thread's nice value go down to nice. */
static bool can_nice(int nice)
{
    return (rlim_t)(20 - nice) <= rlimit_cur(RLIMIT_NICE) || cap_sys_nice();
}

/* The nice value of st's thread (st->lock held). */
static int nice_of(struct sthread *st)
{
    if (st->nice_set)
        return st->nice;
    long r = rt_syscall(SYS_getpriority, PRIO_PROCESS, 0, 0); /* 20 - nice */
    return r > 0 ? 20 - (int)r : 0;
}

/* ---- scheduling policy and priority ---------------------------------------------- */

static bool rt_policy(int policy)
{
    return policy == SCHED_FIFO || policy == SCHED_RR;
}

/* policy (without SCHED_RESET_ON_FORK) is one sched_setscheduler takes, with priority prio. */
static int check_sched(int policy, int prio)
{
    if (policy != SCHED_OTHER && policy != SCHED_BATCH && policy != SCHED_IDLE &&
        !rt_policy(policy))
        return EINVAL; /* SCHED_DEADLINE needs sched_setattr */
    int lo = sched_get_priority_min(policy), hi = sched_get_priority_max(policy);
    if (lo < 0 || hi < 0 || prio < lo || prio > hi)
        return EINVAL;
    return 0;
}

/* Checks the kernel makes of a thread without CAP_SYS_NICE that sets st's thread's policy
 * (with the flag) and priority: 0 or EPERM (st->lock held). */
static int sched_permitted(struct sthread *st, int policy, int prio)
{
    int old = st->policy & ~SCHED_RESET_ON_FORK, pol = policy & ~SCHED_RESET_ON_FORK;
    rlim_t rtprio = rlimit_cur(RLIMIT_RTPRIO);
    bool need = false;
    if (rt_policy(pol)) /* a real-time policy: a new one, or a higher priority, past the limit */
        need = (pol != old && rtprio == 0) ||
               (prio > st->param.sched_priority && (rlim_t)prio > rtprio);
    if (old == SCHED_IDLE && pol != SCHED_IDLE && !can_nice(nice_of(st)))
        need = true; /* out of SCHED_IDLE only where RLIMIT_NICE would allow its nice value */
    if ((st->policy & SCHED_RESET_ON_FORK) && !(policy & SCHED_RESET_ON_FORK))
        need = true;
    return need && !cap_sys_nice() ? EPERM : 0;
}

/* Set st's policy (-1: keep it, sched_setparam) and priority: 0 or an error number. */
static int setsched_of(struct sthread *st, int policy, const struct sched_param *param)
{
    if (!param)
        return EINVAL;
    runtime_lock(&st->lock);
    int pol = policy < 0 ? st->policy : policy;
    int err = check_sched(pol & ~SCHED_RESET_ON_FORK, param->sched_priority);
    if (!err)
        err = sched_permitted(st, pol, param->sched_priority);
    if (!err) {
        st->policy = pol;
        st->param = *param;
    }
    runtime_unlock(&st->lock);
    return err;
}

GOSHIM_EXPORT int pthread_getschedparam(pthread_t t, int *policy, struct sched_param *param)
{
    STHREAD_OR_GLIBC(st, t, pthread_getschedparam, policy, param);
    runtime_lock(&st->lock);
    *policy = st->policy & ~SCHED_RESET_ON_FORK;
    *param = st->param;
    runtime_unlock(&st->lock);
    return 0;
}

GOSHIM_EXPORT int pthread_setschedparam(pthread_t t, int policy, const struct sched_param *param)
{
    STHREAD_OR_GLIBC(st, t, pthread_setschedparam, policy, param);
    return policy < 0 ? EINVAL : setsched_of(st, policy, param);
}

GOSHIM_EXPORT int pthread_setschedprio(pthread_t t, int prio)
{
    STHREAD_OR_GLIBC(st, t, pthread_setschedprio, prio);
    struct sched_param param = {.sched_priority = prio};
    return setsched_of(st, -1, &param);
}

/* The scheduling calls by tid (nr), as the kernel answers them: a policy, 0 or -errno. */
static long sched_tid(long nr, pid_t tid, int policy, struct sched_param *param)
{
    if (tid < 0 || (nr == SYS_sched_setscheduler && policy < 0))
        return -EINVAL;
    if (!param && nr != SYS_sched_getscheduler)
        return -EINVAL;
    pid_t ktid;
    bool locked;
    struct sthread *st = settings_of(tid, &ktid, &locked);
    long r = 0;
    if (!st && nr == SYS_sched_setscheduler)
        r = rt_syscall(nr, ktid, policy, param);
    else if (!st)
        r = rt_syscall(nr, ktid, param, 0);
    else if (nr == SYS_sched_setscheduler || nr == SYS_sched_setparam)
        r = -setsched_of(st, nr == SYS_sched_setparam ? -1 : policy, param);
    else {
        runtime_lock(&st->lock);
        if (nr == SYS_sched_getscheduler)
            r = st->policy;
        else
            *param = st->param;
        runtime_unlock(&st->lock);
    }
    done(locked);
    return r;
}

/* A kernel-style answer r as libc returns it: r, or -1 with errno. */
static int libc_answer(long r)
{
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return (int)r;
}

GOSHIM_EXPORT int sched_setscheduler(pid_t tid, int policy, const struct sched_param *param)
{
    return libc_answer(sched_tid(SYS_sched_setscheduler, tid, policy, (struct sched_param *)param));
}

GOSHIM_EXPORT int sched_getscheduler(pid_t tid)
{
    return libc_answer(sched_tid(SYS_sched_getscheduler, tid, 0, NULL));
}

GOSHIM_EXPORT int sched_setparam(pid_t tid, const struct sched_param *param)
{
    return libc_answer(sched_tid(SYS_sched_setparam, tid, 0, (struct sched_param *)param));
}

GOSHIM_EXPORT int sched_getparam(pid_t tid, struct sched_param *param)
{
    return libc_answer(sched_tid(SYS_sched_getparam, tid, 0, param));
}

/* ---- nice value ------------------------------------------------------------------ */

/* set_nice_of keeps nice (clamped) as st's: 0, or -denied when it may not be lowered. */
static long set_nice_of(struct sthread *st, int nice, int denied)
{
    long r = 0;
    nice = nice < -20 ? -20 : nice > 19 ? 19 : nice;
    runtime_lock(&st->lock);
    if (nice < nice_of(st) && !can_nice(nice)) {
        r = -denied;
    } else {
        st->nice = nice;
        st->nice_set = true;
    }
    runtime_unlock(&st->lock);
    return r;
}

/*
 * setpriority (nr, with nice) and getpriority: the system calls' answers
 * (getpriority's is 20 - nice, never negative; -errno). PRIO_PROCESS is
 * per thread on Linux; PRIO_PGRP and PRIO_USER go to the kernel.
 */
static long priority_tid(long nr, int which, id_t who, int nice)
{
    pid_t ktid = (pid_t)who;
    bool locked = false;
    struct sthread *st = NULL;
    if (which == PRIO_PROCESS && (pid_t)who >= 0)
        st = settings_of((pid_t)who, &ktid, &locked);
    long r = 0;
    if (!st) {
        r = rt_syscall(nr, which, ktid, nice);
    } else if (nr == SYS_getpriority) {
        runtime_lock(&st->lock);
        r = 20 - nice_of(st);
        runtime_unlock(&st->lock);
    } else {
        r = set_nice_of(st, nice, EACCES);
    }
    done(locked);
    return r;
}

GOSHIM_EXPORT int getpriority(__priority_which_t which, id_t who)
{
    long r = priority_tid(SYS_getpriority, which, who, 0);
    return r < 0 ? libc_answer(r) : 20 - (int)r; /* glibc's: the nice value */
}

GOSHIM_EXPORT int setpriority(__priority_which_t which, id_t who, int nice)
{
    return libc_answer(priority_tid(SYS_setpriority, which, who, nice));
}

/* nice(), whose calls of getpriority and setpriority are glibc's own: the caller's. */
GOSHIM_EXPORT int nice(int inc)
{
    int saved = errno;
    long r = priority_tid(SYS_getpriority, PRIO_PROCESS, 0, 0);
    if (r < 0)
        return libc_answer(r);
    long want = 20 - r + (long)inc; /* setpriority clamps it */
    want = want < -40 ? -40 : want > 40 ? 40 : want;
    r = priority_tid(SYS_setpriority, PRIO_PROCESS, 0, (int)want);
    if (r < 0)
        return libc_answer(r == -EACCES ? -EPERM : r); /* as glibc's */
    r = priority_tid(SYS_getpriority, PRIO_PROCESS, 0, 0);
    if (r < 0)
        return libc_answer(r);
    errno = saved;
    return 20 - (int)r;
}

/*
 * sched_getattr and sched_setattr by tid (GLib copies a thread's scheduler
 * settings to the threads it makes this way): a G's are its record's
 * policy, priority and nice value, as the calls above keep them. Only the
 * version-0 fields (48 bytes) mean anything here; deadline and utilisation
 * clamps are the kernel's business and go unanswered (zero) or refused.
 */
struct attr0 {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
};

static long attr_tid(long nr, pid_t tid, struct attr0 *attr, unsigned long arg)
{
    if (tid < 0 || !attr)
        return -EINVAL;
    pid_t ktid;
    bool locked;
    struct sthread *st = settings_of(tid, &ktid, &locked);
    long r = 0;
    if (!st) {
        r = nr == SYS_sched_getattr ? rt_syscall6(nr, ktid, (long)attr, (long)arg, 0, 0, 0)
                                    : rt_syscall(nr, ktid, (long)attr, (long)arg);
    } else if (nr == SYS_sched_getattr) {
        if (arg < sizeof *attr) {
            r = -EINVAL;
        } else {
            runtime_lock(&st->lock);
            memset(attr, 0, sizeof *attr);
            attr->size = sizeof *attr;
            attr->policy = (uint32_t)st->policy;
            attr->priority = (uint32_t)st->param.sched_priority;
            attr->nice = nice_of(st);
            runtime_unlock(&st->lock);
        }
    } else if (attr->size != 0 && attr->size < sizeof *attr) {
        r = -EINVAL;
    } else {
        struct sched_param param = {.sched_priority = (int)attr->priority};
        r = -setsched_of(st, (int)attr->policy, &param);
        if (r == 0 && !rt_policy((int)attr->policy))
            r = set_nice_of(st, attr->nice, EPERM);
    }
    done(locked);
    return r;
}

/* sched_rr_get_interval by tid: a G's is what the kernel says for the asking OS thread. */
static long rr_interval_tid(pid_t tid, struct timespec *ts)
{
    pid_t ktid;
    bool locked;
    struct sthread *st = settings_of(tid, &ktid, &locked);
    done(locked);
    return rt_syscall(SYS_sched_rr_get_interval, st ? 0 : ktid, ts, 0);
}

GOSHIM_EXPORT int sched_rr_get_interval(pid_t tid, struct timespec *ts)
{
    return libc_answer(rr_interval_tid(tid, ts));
}

/* ---- kill and sigqueue ------------------------------------------------------------ */

pid_t shim_kill_pid(pid_t pid)
{
    if (pid < PID_MAX_LIMIT || !goshim_on)
        return pid;
    bool locked;
    struct sthread *st = find(pid, &locked);
    done(locked);
    return st ? getpid() : pid;
}

/* ---- new threads ------------------------------------------------------------------ */

/*
 * A new thread's kernel settings (pthread_create): the policy and priority of its attributes
 * (explicit, not NULL) or its creator's, and its creator's nice value; SCHED_RESET_ON_FORK
 * is the creator's alone, and takes a real-time policy and a negative nice value back to
 * the default, as the kernel does for a new thread. The main thread's are its OS
 * thread's, which the new one does not have: it reports the defaults.
 */
void sthread_inherit_settings(struct sthread *st, struct sthread *creator,
                              const struct sched_param *explicit, int policy)
{
    if (explicit) { /* kept and reported, not enforced */
        st->policy = policy;
        st->param = *explicit;
    }
    if (!creator || creator->is_main)
        return;
    bool reset = creator->policy & SCHED_RESET_ON_FORK;
    int pol = creator->policy & ~SCHED_RESET_ON_FORK;
    if (!explicit && !(reset && (pol == SCHED_FIFO || pol == SCHED_RR))) {
        st->policy = pol;
        st->param = creator->param;
    }
    st->nice = reset && creator->nice < 0 ? 0 : creator->nice;
    st->nice_set = creator->nice_set;
}

/* ---- syscall() ------------------------------------------------------------------- */

bool shim_tid_syscall(long nr, long a, long b, long c, long *ret)
{
    switch (nr) {
    case SYS_gettid:
        *ret = tid_self();
        return true;
    case SYS_set_tid_address:
        /* It answers the caller's tid. The address it would set is the OS thread's
         * clear_child_tid, which glibc owns for the M: a thread's request is not passed on
         * (README, Limits: nothing is cleared at the thread's exit). A thread goshim does not
         * run is its own OS thread: the kernel's. */
        if (!sthread_self())
            return false;
        *ret = tid_self();
        return true;
    case SYS_tgkill:
        *ret = kill_tid(nr, (pid_t)a, (pid_t)b, (int)c);
        return true;
    case SYS_tkill:
        *ret = kill_tid(nr, 0, (pid_t)a, (int)b);
        return true;
    case SYS_sched_getaffinity:
    case SYS_sched_setaffinity:
        *ret = affinity_tid(nr, (pid_t)a, (size_t)b, (void *)c);
        return true;
    case SYS_sched_setscheduler:
        *ret = sched_tid(nr, (pid_t)a, (int)b, (struct sched_param *)c);
        return true;
    case SYS_sched_getscheduler:
        *ret = sched_tid(nr, (pid_t)a, 0, NULL);
        return true;
    case SYS_sched_setparam:
    case SYS_sched_getparam:
        *ret = sched_tid(nr, (pid_t)a, 0, (struct sched_param *)b);
        return true;
    case SYS_setpriority:
    case SYS_getpriority:
        *ret = priority_tid(nr, (int)a, (id_t)b, (int)c);
        return true;
    case SYS_sched_rr_get_interval:
        *ret = rr_interval_tid((pid_t)a, (struct timespec *)b);
        return true;
    case SYS_sched_getattr:
    case SYS_sched_setattr:
        *ret = attr_tid(nr, (pid_t)a, (struct attr0 *)b, (unsigned long)c);
        return true;
    default:
        return false;
    }
}
