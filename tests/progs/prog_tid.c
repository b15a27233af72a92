/*
 * Thread ids: every live thread has its own (gettid() and syscall(SYS_gettid)
 * agree; the main thread's is the pid), and the calls that take one act on
 * that thread: tgkill and tkill run the handler there, the affinity,
 * scheduling policy and nice value set by tid are that thread's alone and
 * read back by tid, by the pthread calls and by the thread itself (nice()
 * too; sched_setattr and sched_getattr through syscall(), as GLib calls them); kill
 * given a thread's tid signals the process. A tid of a thread
 * that is gone is ESRCH; another process's tid still works.
 * 16 threads are alive at once, parked on a semaphore between rounds.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "prog_check.h"

#define NT 16

/*
 * errno read and cleared out of line. glibc declares __errno_location const,
 * so inline code may keep errno's address from before a wait; under
 * GOSHIM_TLS=errno, where errno lies in the OS thread's TLS, the thread may
 * have moved to another OS thread meanwhile (its errno goes with it, not the
 * address).
 */
__attribute__((noinline, noipa)) static int errno_now(void)
{
    return errno;
}

__attribute__((noinline, noipa)) static void errno_clear(void)
{
    errno = 0;
}

struct worker {
    pthread_t t;
    pid_t tid, systid;
    cpu_set_t own_mask; /* sched_getaffinity(0) on the thread, asked in the check round */
    int own_policy, own_nice, nice_after; /* nice_after: nice(1) on thread 13 */
    pid_t own_tid;
};

static struct worker w[NT];
static pthread_barrier_t alive;
static sem_t go[NT], done;
static volatile int round_no; /* 1: report own settings; 2: exit */

/* The handler's record: on which thread it ran. */
static volatile pid_t handler_tid;
static volatile pthread_t handler_self;
static sem_t handled;

static void on_usr1(int sig)
{
    (void)sig;
    handler_tid = gettid();
    handler_self = pthread_self();
    sem_post(&handled);
}

static void *worker(void *arg)
{
    struct worker *me = arg;
    sem_t *mine = &go[me - w];
    me->tid = gettid();
    me->systid = (pid_t)syscall(SYS_gettid);
    pthread_barrier_wait(&alive);
    for (;;) {
        wait_sem(mine);
        if (round_no == 2)
            return NULL;
        me->own_tid = gettid();
        CHECK(sched_getaffinity(0, sizeof me->own_mask, &me->own_mask) == 0);
        me->own_policy = sched_getscheduler(0);
        errno_clear();
        me->own_nice = getpriority(PRIO_PROCESS, 0);
        CHECK(errno_now() == 0);
        if (me == &w[13])
            me->nice_after = nice(1);
        sem_post(&done);
    }
}

/* All the workers run one round of their loop. */
static void round_all(int r)
{
    round_no = r;
    for (int i = 0; i < NT; i++)
        sem_post(&go[i]);
    if (r == 2)
        return;
    for (int i = 0; i < NT; i++)
        wait_sem(&done);
}

/* The handler ran within 10 s (a signal that went astray must not hang the test). */
static int await_handler(void)
{
    struct timespec dl = in_ms(CLOCK_REALTIME, 10000);
    int r;
    while ((r = sem_timedwait(&handled, &dl)) == -1 && errno_now() == EINTR)
        ;
    return r == 0;
}

/* Signal worker k with how (0 tgkill, 1 syscall tgkill, 2 syscall tkill): the handler ran
 * on it. */
static int kill_runs_there(int k, int how)
{
    int r;
    if (how == 0)
        r = tgkill(getpid(), w[k].tid, SIGUSR1);
    else if (how == 1)
        r = (int)syscall(SYS_tgkill, getpid(), w[k].tid, SIGUSR1);
    else
        r = (int)syscall(SYS_tkill, w[k].tid, SIGUSR1);
    CHECK(r == 0);
    return await_handler() && handler_tid == w[k].tid && pthread_equal(handler_self, w[k].t);
}

/* Print what call (one that sets errno) returned, and whether errno is then err. */
#define SAYS(label, call, err)                                                                     \
    do {                                                                                           \
        errno_clear();                                                                             \
        int r_ = (call), e_ = errno_now();                                                         \
        printf("%s: %d %s %d\n", label, r_, #err, e_ == (err));                                    \
    } while (0)

static int distinct(const pid_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (ids[i] == ids[j])
                return 0;
    return 1;
}

/* Settings set by tid, for the threads' own reports. */
static cpu_set_t one;
static int pol10, want;

/* Start the threads; every live thread's id is its own. */
static void ids_step(void)
{
    printf("main: gettid() == getpid(): %d, syscall(SYS_gettid) == getpid(): %d\n",
           gettid() == getpid(), (pid_t)syscall(SYS_gettid) == getpid());

    for (int i = 0; i < NT; i++)
        EXPECT(pthread_create(&w[i].t, NULL, worker, &w[i]), 0);
    pthread_barrier_wait(&alive);

    pid_t ids[NT + 1];
    int agree = 1;
    for (int i = 0; i < NT; i++) {
        ids[i] = w[i].tid;
        agree &= w[i].tid == w[i].systid && w[i].tid > 0;
    }
    ids[NT] = getpid();
    printf("%d threads alive: gettid() == syscall(SYS_gettid) on each: %d; %d ids distinct, "
           "the main thread's included: %d\n",
           NT, agree, NT + 1, distinct(ids, NT + 1));
}

/* Signals by tid. */
static void signals_step(void)
{
    printf("tgkill to thread 3's tid: the handler ran on thread 3: %d\n", kill_runs_there(3, 0));
    printf("syscall(SYS_tgkill) to thread 5's tid: the handler ran on thread 5: %d\n",
           kill_runs_there(5, 1));
    printf("syscall(SYS_tkill) to thread 7's tid: the handler ran on thread 7: %d\n",
           kill_runs_there(7, 2));
    CHECK(tgkill(getpid(), getpid(), SIGUSR1) == 0);
    printf("tgkill to the main thread's tid: the handler ran on it: %d\n",
           await_handler() && handler_tid == getpid() &&
               pthread_equal(handler_self, pthread_self()));
    printf("tgkill signal 0 to thread 9's tid: %d\n", tgkill(getpid(), w[9].tid, 0));
    int r = kill(w[2].tid, SIGUSR1);
    printf("kill(tid of thread 2): %d, signals the process: a handler ran: %d\n", r,
           await_handler());
    struct timespec ts;
    printf("sched_rr_get_interval(tid of thread 15): %d\n", sched_rr_get_interval(w[15].tid, &ts));
}

/* Affinity by tid: thread 4 gets one CPU of its mask; thread 6 keeps its own. */
static void affinity_step(void)
{
    cpu_set_t before4, before6, got;
    CHECK(sched_getaffinity(w[4].tid, sizeof before4, &before4) == 0);
    CHECK(sched_getaffinity(w[6].tid, sizeof before6, &before6) == 0);
    int cpu = 0;
    while (!CPU_ISSET(cpu, &before4))
        cpu++;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    CHECK(sched_setaffinity(w[4].tid, sizeof one, &one) == 0);
    CHECK(sched_getaffinity(w[4].tid, sizeof got, &got) == 0);
    printf("sched_setaffinity(tid of thread 4, one CPU): sched_getaffinity(tid) reads it back: "
           "%d\n",
           CPU_EQUAL(&got, &one));
    long n = syscall(SYS_sched_getaffinity, w[4].tid, sizeof got, &got);
    printf("syscall(SYS_sched_getaffinity, tid): a byte count: %d, the mask: %d\n",
           n > 0 && n <= (long)sizeof got && n % (long)sizeof(long) == 0, CPU_EQUAL(&got, &one));
    EXPECT(pthread_getaffinity_np(w[4].t, sizeof got, &got), 0);
    printf("pthread_getaffinity_np(thread 4) agrees: %d\n", CPU_EQUAL(&got, &one));
    CHECK(sched_getaffinity(w[6].tid, sizeof got, &got) == 0);
    printf("thread 6's affinity unchanged: %d\n", CPU_EQUAL(&got, &before6));
    CHECK(syscall(SYS_sched_setaffinity, w[6].tid, sizeof one, &one) == 0);
    CHECK(sched_getaffinity(w[6].tid, sizeof got, &got) == 0);
    printf("syscall(SYS_sched_setaffinity, tid of thread 6): read back: %d\n",
           CPU_EQUAL(&got, &one));
    CPU_ZERO(&got);
    SAYS("sched_setaffinity(tid, empty mask)", sched_setaffinity(w[6].tid, sizeof got, &got),
         EINVAL);
}

/* Scheduling policy by tid: thread 8 goes SCHED_BATCH; thread 10 stays. */
static void sched_step(void)
{
    struct sched_param sp = {0};
    pol10 = sched_getscheduler(w[10].tid);
    CHECK(pol10 >= 0);
    CHECK(sched_setscheduler(w[8].tid, SCHED_BATCH, &sp) == 0);
    printf("sched_setscheduler(tid of thread 8, SCHED_BATCH): sched_getscheduler(tid) == "
           "SCHED_BATCH: %d\n",
           sched_getscheduler(w[8].tid) == SCHED_BATCH);
    printf("syscall(SYS_sched_getscheduler, tid) agrees: %d\n",
           syscall(SYS_sched_getscheduler, w[8].tid) == SCHED_BATCH);
    int pol;
    EXPECT(pthread_getschedparam(w[8].t, &pol, &sp), 0);
    printf("pthread_getschedparam(thread 8) agrees: %d, priority %d\n", pol == SCHED_BATCH,
           sp.sched_priority);
    printf("thread 10's policy unchanged: %d\n", sched_getscheduler(w[10].tid) == pol10);
    sp.sched_priority = 0;
    printf("sched_setparam(tid, priority 0): %d\n", sched_setparam(w[8].tid, &sp));
    sp.sched_priority = -1;
    int r = sched_getparam(w[8].tid, &sp);
    printf("sched_getparam(tid): %d, priority %d\n", r, sp.sched_priority);
    sp.sched_priority = 5;
    SAYS("sched_setparam(tid, priority 5 under SCHED_BATCH)", sched_setparam(w[8].tid, &sp),
         EINVAL);
    SAYS("sched_setscheduler(tid, SCHED_OTHER, priority 5)",
         sched_setscheduler(w[8].tid, SCHED_OTHER, &sp), EINVAL);
    sp.sched_priority = 0;
    CHECK(syscall(SYS_sched_setscheduler, w[12].tid, SCHED_IDLE, &sp) == 0);
    printf("syscall(SYS_sched_setscheduler, tid of thread 12, SCHED_IDLE): read back: %d\n",
           sched_getscheduler(w[12].tid) == SCHED_IDLE);
}

/* Nice value by tid: thread 11 gets 5 more; thread 13 keeps its own. */
static void nice_step(void)
{
    errno_clear();
    int nice11 = getpriority(PRIO_PROCESS, w[11].tid);
    int nice13 = getpriority(PRIO_PROCESS, w[13].tid);
    CHECK(errno_now() == 0);
    want = nice11 + 5 > 19 ? 19 : nice11 + 5;
    CHECK(setpriority(PRIO_PROCESS, w[11].tid, want) == 0);
    errno_clear();
    int r = getpriority(PRIO_PROCESS, w[11].tid);
    printf("setpriority(PRIO_PROCESS, tid of thread 11, +5): getpriority(tid) reads it: %d\n",
           r == want && errno_now() == 0);
    printf("syscall(SYS_getpriority, PRIO_PROCESS, tid) is 20 - nice: %d\n",
           syscall(SYS_getpriority, PRIO_PROCESS, w[11].tid) == 20 - want);
    printf("thread 13's nice value unchanged: %d\n",
           getpriority(PRIO_PROCESS, w[13].tid) == nice13);
    CHECK(syscall(SYS_setpriority, PRIO_PROCESS, w[13].tid, want) == 0);
    printf("syscall(SYS_setpriority, PRIO_PROCESS, tid of thread 13): read back: %d\n",
           getpriority(PRIO_PROCESS, w[13].tid) == want);
}

/* struct sched_attr as the kernel defines it (glibc 2.36 has no declaration). */
struct attr {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
};

static int attr_nice; /* what thread 1 gets through sched_setattr */

static long get_attr(pid_t tid, struct attr *a)
{
    memset(a, 0xff, sizeof *a);
    return syscall(SYS_sched_getattr, tid, a, sizeof *a, 0);
}

/* sched_getattr and sched_setattr by tid (GLib's thread pool copies its creator's attributes
 * with them): thread 1 gets a higher nice value; thread 2 keeps its own. */
static void attr_step(void)
{
    struct attr a1, a2, got;
    CHECK(get_attr(w[1].tid, &a1) == 0 && get_attr(w[2].tid, &a2) == 0);
    printf("sched_getattr(tid of thread 1): size %d, policy SCHED_OTHER %d\n", a1.size == sizeof a1,
           a1.policy == SCHED_OTHER);
    attr_nice = a1.nice + 3 > 19 ? 19 : a1.nice + 3;
    struct attr set = {.size = sizeof set, .policy = SCHED_OTHER, .nice = attr_nice};
    printf("sched_setattr(tid of thread 1, nice + 3): %ld\n",
           syscall(SYS_sched_setattr, w[1].tid, &set, 0));
    CHECK(get_attr(w[1].tid, &got) == 0);
    printf("sched_getattr(tid) reads it back: %d; getpriority(tid) agrees: %d\n",
           got.nice == attr_nice && got.policy == SCHED_OTHER,
           getpriority(PRIO_PROCESS, w[1].tid) == attr_nice);
    CHECK(get_attr(w[2].tid, &got) == 0);
    printf("thread 2's attributes unchanged: %d\n", got.nice == a2.nice && got.policy == a2.policy);
    set.policy = SCHED_BATCH;
    set.nice = a2.nice;
    CHECK(syscall(SYS_sched_setattr, w[2].tid, &set, 0) == 0);
    printf("sched_setattr(tid of thread 2, SCHED_BATCH): sched_getscheduler(tid) reads it: %d\n",
           sched_getscheduler(w[2].tid) == SCHED_BATCH);
    errno_clear();
    long r = syscall(SYS_sched_getattr, w[1].tid, &got, 8, 0);
    printf("sched_getattr(tid, size 8): %ld EINVAL %d\n", r, errno_now() == EINVAL);
}

/* Each thread asks about itself (tid 0). */
static void own_step(void)
{
    round_all(1);
    int own = 1;
    for (int i = 0; i < NT; i++)
        own &= w[i].own_tid == w[i].tid;
    printf("each thread's gettid() is the same later: %d\n", own);
    printf("thread 4 sees its affinity with sched_getaffinity(0): %d\n",
           CPU_EQUAL(&w[4].own_mask, &one));
    printf("thread 8 sees SCHED_BATCH with sched_getscheduler(0): %d\n",
           w[8].own_policy == SCHED_BATCH);
    printf("thread 11 sees its nice value with getpriority(PRIO_PROCESS, 0): %d\n",
           w[11].own_nice == want);
    printf("thread 10 sees its policy unchanged: %d\n", w[10].own_policy == pol10);
    printf("thread 1 sees the nice value sched_setattr gave it: %d\n", w[1].own_nice == attr_nice);
    printf("thread 2 sees SCHED_BATCH: %d\n", w[2].own_policy == SCHED_BATCH);
    errno_clear();
    int r = getpriority(PRIO_PROCESS, w[13].tid);
    printf("nice(1) on thread 13 returns its new nice value, getpriority(tid) reads it: %d\n",
           w[13].nice_after == w[13].own_nice + 1 && r == w[13].nice_after && errno_now() == 0);
    printf("thread 14's nice value is not changed by it: %d\n",
           getpriority(PRIO_PROCESS, w[14].tid) == w[14].own_nice);
}

/* Tids of threads that are gone: ESRCH from every call. */
static void gone_step(void)
{
    cpu_set_t got;
    round_all(2);
    for (int i = 0; i < NT; i++)
        EXPECT(pthread_join(w[i].t, NULL), 0);
    pid_t gone = w[4].tid;
    SAYS("a joined thread's tid: tgkill", tgkill(getpid(), gone, 0), ESRCH);
    SAYS("a joined thread's tid: kill", kill(gone, 0), ESRCH);
    SAYS("a joined thread's tid: syscall(SYS_tkill)", (int)syscall(SYS_tkill, gone, SIGUSR1),
         ESRCH);
    SAYS("a joined thread's tid: sched_getaffinity", sched_getaffinity(gone, sizeof got, &got),
         ESRCH);
    SAYS("a joined thread's tid: sched_setaffinity", sched_setaffinity(gone, sizeof one, &one),
         ESRCH);
    SAYS("a joined thread's tid: sched_getscheduler", sched_getscheduler(gone), ESRCH);
    SAYS("a joined thread's tid: getpriority", getpriority(PRIO_PROCESS, gone), ESRCH);
    SAYS("a joined thread's tid: setpriority", setpriority(PRIO_PROCESS, gone, want), ESRCH);
    struct attr a;
    SAYS("a joined thread's tid: sched_getattr", (int)get_attr(gone, &a), ESRCH);
}

int main(void)
{
    struct sigaction sa = {.sa_handler = on_usr1};
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    for (int i = 0; i < NT; i++)
        sem_init(&go[i], 0, 0);
    sem_init(&done, 0, 0);
    sem_init(&handled, 0, 0);
    pthread_barrier_init(&alive, NULL, NT + 1);

    ids_step();
    signals_step();
    affinity_step();
    sched_step();
    nice_step();
    attr_step();
    own_step();
    gone_step();

    /* Another process's tid (the parent's): the kernel's answer. */
    cpu_set_t got;
    printf("another process's tid: sched_getaffinity %d, sched_getscheduler >= 0 %d\n",
           sched_getaffinity(getppid(), sizeof got, &got), sched_getscheduler(getppid()) >= 0);
    return 0;
}
