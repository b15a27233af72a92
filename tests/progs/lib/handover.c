/*
 * libgoshim_handover.so: synchronisation objects used through glibc, then
 * handed over to goshim (prog_sync_handover, tests/progs/handover.h).
 *
 * A library the program is linked against (DT_NEEDED) is initialised
 * before the LD_PRELOAD libraries, libgoshim.so among them, as GObject's
 * constructors are: so this constructor runs before goshim's runtime
 * starts, every pthread call in it passes through goshim's interposers to
 * glibc, and its threads are glibc's kernel threads. It checks that rather
 * than trusting the order: goshim's runtime starts OS threads of its own
 * (sysmon and others), so the process has exactly one kernel thread when
 * the constructor begins only if goshim has not started (ctor_tasks; the
 * program prints whether it was 1).
 *
 * Each object is taken through glibc's paths — uncontended, timed out,
 * contended with a waiter that blocks in the kernel and is woken — and left
 * idle, in whatever state glibc's algorithm leaves behind (a rwlock in its
 * write phase, a barrier's counters after full rounds, ...). Waits that must
 * time out get a few milliseconds; a waiter counts as blocked once its
 * thread sleeps in a futex system call (/proc/self/task/TID/syscall).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include "../handover.h"

enum {
    SHORT_MS = 2,   /* a wait that must time out */
    LONG_MS = 5000, /* a wait that must not */
};

struct handover handover = {
    .cond_mutex = PTHREAD_MUTEX_INITIALIZER,
    .once = PTHREAD_ONCE_INIT,
    .c11_once = ONCE_FLAG_INIT,
};

void handover_once_routine(void)
{
    __atomic_fetch_add(&handover.once_runs, 1, __ATOMIC_SEQ_CST);
}

/* Note an unexpected result; the program prints the notes. */
static void note(const char *what, int got, int want)
{
    size_t len = strlen(handover.errors);
    if (got != want)
        snprintf(handover.errors + len, sizeof handover.errors - len, "%s: %d, want %d\n", what,
                 got, want);
}

#define WANT(expr, want) note(#expr, (expr), (want))

static struct timespec in_ms(clockid_t clk, long ms)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

static int ntasks(void)
{
    char buf[4096];
    int n = 0, fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY);
    long got;
    if (fd < 0)
        return -1;
    while ((got = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
        for (long off = 0; off < got;) {
            unsigned short reclen = *(unsigned short *)(buf + off + 16);
            if (buf[off + 19] != '.')
                n++;
            off += reclen;
        }
    }
    close(fd);
    return n;
}

/* ---- a job: one call made on a thread of its own ------------------------------------- */

struct job {
    pthread_t thread;
    int (*fn)(void *);
    void *obj;
    int tid; /* published just before the call */
    int result;
};

static void *job_main(void *p)
{
    struct job *j = p;
    __atomic_store_n(&j->tid, (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
    j->result = j->fn(j->obj);
    return NULL;
}

static void job_start(struct job *j, int (*fn)(void *), void *obj)
{
    j->fn = fn;
    j->obj = obj;
    j->tid = 0;
    WANT(pthread_create(&j->thread, NULL, job_main, j), 0);
}

static int job_join(struct job *j)
{
    WANT(pthread_join(j->thread, NULL), 0);
    return j->result;
}

/* Wait until the job's thread sleeps in the kernel's futex wait: its call blocked. */
static void job_await_blocked(struct job *j)
{
    char path[64], buf[64];
    int tid;

    while ((tid = __atomic_load_n(&j->tid, __ATOMIC_ACQUIRE)) == 0)
        sched_yield();
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    for (;;) {
        int fd = open(path, O_RDONLY);
        ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
        if (fd >= 0)
            close(fd);
        if (n > 0) {
            buf[n] = '\0';
            if (atoi(buf) == SYS_futex)
                return;
        }
        sched_yield();
    }
}

/* Run fn(obj) on a job and return its result. */
static int on_job(int (*fn)(void *), void *obj)
{
    struct job j;
    job_start(&j, fn, obj);
    return job_join(&j);
}

/* fn(obj) on a job that blocks until release(obj) here; its result. */
static int woken_job(int (*fn)(void *), void *obj, int (*release)(void *))
{
    struct job j;
    job_start(&j, fn, obj);
    job_await_blocked(&j);
    WANT(release(obj), 0);
    return job_join(&j);
}

/* ---- mutexes -------------------------------------------------------------------------- */

static int mx_lock_unlock(void *m)
{
    int r = pthread_mutex_lock(m);
    return r ? r : pthread_mutex_unlock(m);
}

static int mx_timedlock_short(void *m)
{
    struct timespec d = in_ms(CLOCK_REALTIME, SHORT_MS);
    return pthread_mutex_timedlock(m, &d);
}

static int mx_unlock(void *m)
{
    return pthread_mutex_unlock(m);
}

static void use_mutex(pthread_mutex_t *m, int type)
{
    struct timespec d = in_ms(CLOCK_REALTIME, LONG_MS);

    WANT(pthread_mutex_lock(m), 0);
    WANT(pthread_mutex_unlock(m), 0);
    WANT(pthread_mutex_trylock(m), 0);
    WANT(pthread_mutex_unlock(m), 0);
    WANT(pthread_mutex_timedlock(m, &d), 0);
    WANT(pthread_mutex_unlock(m), 0);
    if (type == PTHREAD_MUTEX_RECURSIVE) {
        WANT(pthread_mutex_lock(m), 0);
        WANT(pthread_mutex_lock(m), 0);
        WANT(pthread_mutex_trylock(m), 0);
        WANT(on_job(mx_unlock, m), EPERM);
        WANT(pthread_mutex_unlock(m), 0);
        WANT(pthread_mutex_unlock(m), 0);
        WANT(pthread_mutex_unlock(m), 0);
    }
    if (type == PTHREAD_MUTEX_ERRORCHECK) {
        WANT(pthread_mutex_lock(m), 0);
        WANT(pthread_mutex_lock(m), EDEADLK);
        WANT(on_job(mx_unlock, m), EPERM);
        WANT(pthread_mutex_unlock(m), 0);
        WANT(pthread_mutex_unlock(m), EPERM);
    }
    WANT(pthread_mutex_lock(m), 0);
    WANT(on_job(mx_timedlock_short, m), ETIMEDOUT);
    WANT(woken_job(mx_lock_unlock, m, mx_unlock), 0);
}

static void mutexes(void)
{
    static const char *names[HO_MUTEXES] = {"default", "normal", "recursive", "errorcheck",
                                            "adaptive"};
    static const int types[HO_MUTEXES] = {PTHREAD_MUTEX_DEFAULT, PTHREAD_MUTEX_NORMAL,
                                          PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK,
                                          PTHREAD_MUTEX_ADAPTIVE_NP};

    for (int i = 0; i < HO_MUTEXES; i++) {
        handover.mutex_name[i] = names[i];
        handover.mutex_type[i] = types[i];
        if (i == 0) {
            pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
            handover.mutex[i] = init;
        } else {
            pthread_mutexattr_t a;
            pthread_mutexattr_init(&a);
            WANT(pthread_mutexattr_settype(&a, types[i]), 0);
            WANT(pthread_mutex_init(&handover.mutex[i], &a), 0);
            pthread_mutexattr_destroy(&a);
        }
        use_mutex(&handover.mutex[i], types[i]);
    }
}

/* ---- rwlocks -------------------------------------------------------------------------- */

static int rw_rd_unlock(void *rw)
{
    int r = pthread_rwlock_rdlock(rw);
    return r ? r : pthread_rwlock_unlock(rw);
}

static int rw_wr_unlock(void *rw)
{
    int r = pthread_rwlock_wrlock(rw);
    return r ? r : pthread_rwlock_unlock(rw);
}

static int rw_timedrd_short(void *rw)
{
    struct timespec d = in_ms(CLOCK_REALTIME, SHORT_MS);
    return pthread_rwlock_timedrdlock(rw, &d);
}

static int rw_timedwr_short(void *rw)
{
    struct timespec d = in_ms(CLOCK_REALTIME, SHORT_MS);
    return pthread_rwlock_timedwrlock(rw, &d);
}

static int rw_tryrd(void *rw)
{
    return pthread_rwlock_tryrdlock(rw);
}

static int rw_trywr(void *rw)
{
    return pthread_rwlock_trywrlock(rw);
}

static int rw_unlock(void *rw)
{
    return pthread_rwlock_unlock(rw);
}

static void use_rwlock(pthread_rwlock_t *rw, int state)
{
    struct timespec d = in_ms(CLOCK_REALTIME, LONG_MS);

    switch (state) {
    case 0: /* read */
        WANT(pthread_rwlock_rdlock(rw), 0);
        WANT(pthread_rwlock_rdlock(rw), 0);
        WANT(on_job(rw_rd_unlock, rw), 0);
        WANT(on_job(rw_trywr, rw), EBUSY);
        WANT(pthread_rwlock_unlock(rw), 0);
        WANT(pthread_rwlock_unlock(rw), 0);
        WANT(pthread_rwlock_tryrdlock(rw), 0);
        WANT(pthread_rwlock_unlock(rw), 0);
        break;
    case 1: /* write */
        WANT(pthread_rwlock_wrlock(rw), 0);
        WANT(pthread_rwlock_rdlock(rw), EDEADLK);
        WANT(pthread_rwlock_wrlock(rw), EDEADLK);
        WANT(pthread_rwlock_unlock(rw), 0);
        WANT(pthread_rwlock_trywrlock(rw), 0);
        WANT(pthread_rwlock_unlock(rw), 0);
        break;
    case 2: /* timed: waits that time out, then timed locks that do not */
        WANT(pthread_rwlock_wrlock(rw), 0);
        WANT(on_job(rw_timedrd_short, rw), ETIMEDOUT);
        WANT(on_job(rw_timedwr_short, rw), ETIMEDOUT);
        WANT(pthread_rwlock_unlock(rw), 0);
        WANT(pthread_rwlock_rdlock(rw), 0);
        WANT(on_job(rw_timedwr_short, rw), ETIMEDOUT);
        WANT(pthread_rwlock_unlock(rw), 0);
        WANT(pthread_rwlock_timedrdlock(rw, &d), 0);
        WANT(pthread_rwlock_unlock(rw), 0);
        WANT(pthread_rwlock_timedwrlock(rw, &d), 0);
        WANT(pthread_rwlock_unlock(rw), 0);
        break;
    case 3: /* mixed */
        WANT(pthread_rwlock_rdlock(rw), 0);
        WANT(pthread_rwlock_unlock(rw), 0);
        WANT(pthread_rwlock_wrlock(rw), 0);
        WANT(on_job(rw_tryrd, rw), EBUSY);
        WANT(on_job(rw_trywr, rw), EBUSY);
        WANT(pthread_rwlock_unlock(rw), 0);
        WANT(pthread_rwlock_tryrdlock(rw), 0);
        WANT(pthread_rwlock_unlock(rw), 0);
        WANT(on_job(rw_wr_unlock, rw), 0);
        break;
    case 4: /* woken: waiters that block and are let in */
        WANT(pthread_rwlock_wrlock(rw), 0);
        WANT(woken_job(rw_rd_unlock, rw, rw_unlock), 0);
        WANT(pthread_rwlock_rdlock(rw), 0);
        WANT(woken_job(rw_wr_unlock, rw, rw_unlock), 0);
        WANT(pthread_rwlock_wrlock(rw), 0);
        WANT(woken_job(rw_wr_unlock, rw, rw_unlock), 0);
        break;
    }
}

static void rwlocks(void)
{
    static const char *names[HO_RWLOCKS] = {
        "prefer-reader read",  "prefer-reader write", "prefer-reader timed", "prefer-reader mixed",
        "prefer-reader woken", "prefer-writer read",  "prefer-writer write", "prefer-writer timed",
        "prefer-writer mixed", "prefer-writer woken",
    };

    for (int i = 0; i < HO_RWLOCKS; i++) {
        pthread_rwlockattr_t a;
        pthread_rwlockattr_init(&a);
        WANT(pthread_rwlockattr_setkind_np(&a, i < HO_RWLOCK_STATES
                                                   ? PTHREAD_RWLOCK_PREFER_READER_NP
                                                   : PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP),
             0);
        WANT(pthread_rwlock_init(&handover.rwlock[i], &a), 0);
        pthread_rwlockattr_destroy(&a);
        handover.rwlock_name[i] = names[i];
        use_rwlock(&handover.rwlock[i], i % HO_RWLOCK_STATES);
    }
}

/* ---- condition variables ---------------------------------------------------------------- */

static int cond_go;

static int cond_wait_go(void *c)
{
    struct timespec d = in_ms(CLOCK_REALTIME, LONG_MS);
    int r = 0;
    pthread_mutex_lock(&handover.cond_mutex);
    while (!__atomic_load_n(&cond_go, __ATOMIC_RELAXED) && r == 0)
        r = pthread_cond_timedwait(c, &handover.cond_mutex, &d);
    pthread_mutex_unlock(&handover.cond_mutex);
    return r;
}

static int cond_timedwait_short(void *c)
{
    struct timespec d = in_ms(CLOCK_REALTIME, SHORT_MS);
    pthread_mutex_lock(&handover.cond_mutex);
    int r = pthread_cond_timedwait(c, &handover.cond_mutex, &d);
    pthread_mutex_unlock(&handover.cond_mutex);
    return r;
}

/* A waiter that times out, then two that block and are woken by a signal and a broadcast. */
static void cond_woken(pthread_cond_t *c)
{
    struct job a, b;

    WANT(on_job(cond_timedwait_short, c), ETIMEDOUT);
    cond_go = 0;
    job_start(&a, cond_wait_go, c);
    job_start(&b, cond_wait_go, c);
    job_await_blocked(&a);
    job_await_blocked(&b);
    pthread_mutex_lock(&handover.cond_mutex);
    cond_go = 1;
    WANT(pthread_cond_signal(c), 0);
    pthread_mutex_unlock(&handover.cond_mutex);
    WANT(pthread_cond_broadcast(c), 0);
    WANT(job_join(&a), 0);
    WANT(job_join(&b), 0);
}

static void conds(void)
{
    static const char *names[HO_CONDS] = {"timed out", "signalled", "woken", "wake request"};
    pthread_cond_t *c = handover.cond;
    pthread_condattr_t a;

    for (int i = 0; i < HO_CONDS; i++) {
        handover.cond_name[i] = names[i];
        handover.cond_clock[i] = i == 1 ? CLOCK_MONOTONIC : CLOCK_REALTIME;
    }
    WANT(pthread_cond_init(&c[0], NULL), 0);
    WANT(cond_timedwait_short(&c[0]), ETIMEDOUT);
    WANT(on_job(cond_timedwait_short, &c[0]), ETIMEDOUT);
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    WANT(pthread_cond_init(&c[1], &a), 0);
    pthread_condattr_destroy(&a);
    WANT(pthread_cond_signal(&c[1]), 0);
    WANT(pthread_cond_broadcast(&c[1]), 0);
    WANT(pthread_cond_init(&c[2], NULL), 0);
    cond_woken(&c[2]);
    WANT(pthread_cond_init(&c[3], NULL), 0);
    cond_woken(&c[3]);
    /* glibc (2.36) flags __g_refs' bit 0 when the signaller switching groups finds waiters
     * still leaving the old group; the last one to leave clears it, but when that one left
     * just before the flag was set, the flag stays with no waiter until the next waiter
     * leaves. A race to hit; the state is set here as glibc would leave it. */
    __atomic_fetch_or(&c[3].__data.__g_refs[0], 1u, __ATOMIC_RELAXED);
}

/* ---- semaphore, once, barriers, spinlock ---------------------------------------------- */

static int sem_wait_job(void *s)
{
    return sem_wait(s) ? errno : 0;
}

static int sem_post_job(void *s)
{
    return sem_post(s) ? errno : 0;
}

static void semaphore(void)
{
    sem_t *s = &handover.sem;
    struct timespec d = in_ms(CLOCK_REALTIME, LONG_MS);
    int v = -1;

    WANT(sem_init(s, 0, 0), 0);
    WANT(sem_post(s), 0);
    WANT(sem_post(s), 0);
    WANT(sem_post(s), 0);
    WANT(sem_wait(s), 0);
    WANT(sem_trywait(s), 0);
    WANT(sem_timedwait(s, &d), 0);
    WANT(sem_trywait(s) ? errno : 0, EAGAIN);
    d = in_ms(CLOCK_REALTIME, SHORT_MS);
    WANT(sem_timedwait(s, &d) ? errno : 0, ETIMEDOUT);
    WANT(woken_job(sem_wait_job, s, sem_post_job), 0);
    WANT(sem_post(s), 0);
    WANT(sem_post(s), 0);
    sem_getvalue(s, &v);
    WANT(v, 2);
}

static int barrier_rounds_job(void *b)
{
    int serial = 0;
    for (int r = 0; r < 2; r++)
        serial += pthread_barrier_wait(b) == PTHREAD_BARRIER_SERIAL_THREAD;
    return serial;
}

static void barriers(void)
{
    static const unsigned counts[HO_BARRIERS] = {3, 2, 1};

    for (int i = 0; i < HO_BARRIERS; i++) {
        pthread_barrier_t *b = &handover.barrier[i];
        struct job j[2];
        int serial = 0;

        handover.barrier_count[i] = counts[i];
        WANT(pthread_barrier_init(b, NULL, counts[i]), 0);
        for (unsigned k = 0; k + 1 < counts[i]; k++)
            job_start(&j[k], barrier_rounds_job, b);
        serial += barrier_rounds_job(b);
        for (unsigned k = 0; k + 1 < counts[i]; k++)
            serial += job_join(&j[k]);
        WANT(serial, 2);
    }
}

static int spin_try(void *l)
{
    return pthread_spin_trylock(l);
}

static void spinlock(void)
{
    pthread_spinlock_t *l = &handover.spin;

    WANT(pthread_spin_init(l, PTHREAD_PROCESS_PRIVATE), 0);
    WANT(pthread_spin_lock(l), 0);
    WANT(on_job(spin_try, (void *)l), EBUSY);
    WANT(pthread_spin_unlock(l), 0);
    WANT(pthread_spin_trylock(l), 0);
    WANT(pthread_spin_unlock(l), 0);
}

/* ---- C11 ------------------------------------------------------------------------------- */

static int c11_lock_unlock(void *m)
{
    int r = mtx_lock(m);
    return r != thrd_success ? r : mtx_unlock(m);
}

static int c11_timedlock_short(void *m)
{
    struct timespec d = in_ms(CLOCK_REALTIME, SHORT_MS);
    return mtx_timedlock(m, &d);
}

static int c11_unlock(void *m)
{
    return mtx_unlock(m);
}

static int c11_cnd_wait_go(void *c)
{
    struct timespec d = in_ms(CLOCK_REALTIME, LONG_MS);
    int r = thrd_success;
    mtx_lock(&handover.cnd_mtx);
    while (!__atomic_load_n(&cond_go, __ATOMIC_RELAXED) && r == thrd_success)
        r = cnd_timedwait(c, &handover.cnd_mtx, &d);
    mtx_unlock(&handover.cnd_mtx);
    return r;
}

static int c11_cnd_timedwait_short(void *c)
{
    struct timespec d = in_ms(CLOCK_REALTIME, SHORT_MS);
    mtx_lock(&handover.cnd_mtx);
    int r = cnd_timedwait(c, &handover.cnd_mtx, &d);
    mtx_unlock(&handover.cnd_mtx);
    return r;
}

static void c11(void)
{
    static const char *names[HO_MTXS] = {"plain", "timed", "plain recursive", "timed recursive"};
    static const int types[HO_MTXS] = {mtx_plain, mtx_timed, mtx_plain | mtx_recursive,
                                       mtx_timed | mtx_recursive};
    struct job a, b;

    for (int i = 0; i < HO_MTXS; i++) {
        mtx_t *m = &handover.mtx[i];
        handover.mtx_name[i] = names[i];
        handover.mtx_type[i] = types[i];
        WANT(mtx_init(m, types[i]), thrd_success);
        WANT(mtx_lock(m), thrd_success);
        WANT(mtx_unlock(m), thrd_success);
        WANT(mtx_trylock(m), thrd_success);
        WANT(mtx_unlock(m), thrd_success);
        if (types[i] & mtx_recursive) {
            WANT(mtx_lock(m), thrd_success);
            WANT(mtx_lock(m), thrd_success);
            WANT(mtx_unlock(m), thrd_success);
            WANT(mtx_unlock(m), thrd_success);
        }
        WANT(mtx_lock(m), thrd_success);
        if (types[i] & mtx_timed)
            WANT(on_job(c11_timedlock_short, m), thrd_timedout);
        WANT(woken_job(c11_lock_unlock, m, c11_unlock), thrd_success);
    }

    WANT(mtx_init(&handover.cnd_mtx, mtx_plain), thrd_success);
    for (int i = 0; i < HO_CNDS; i++)
        WANT(cnd_init(&handover.cnd[i]), thrd_success);
    handover.cnd_name[0] = "timed out";
    WANT(c11_cnd_timedwait_short(&handover.cnd[0]), thrd_timedout);
    handover.cnd_name[1] = "woken";
    WANT(on_job(c11_cnd_timedwait_short, &handover.cnd[1]), thrd_timedout);
    cond_go = 0;
    job_start(&a, c11_cnd_wait_go, &handover.cnd[1]);
    job_start(&b, c11_cnd_wait_go, &handover.cnd[1]);
    job_await_blocked(&a);
    job_await_blocked(&b);
    mtx_lock(&handover.cnd_mtx);
    cond_go = 1;
    WANT(cnd_signal(&handover.cnd[1]), thrd_success);
    mtx_unlock(&handover.cnd_mtx);
    WANT(cnd_broadcast(&handover.cnd[1]), thrd_success);
    WANT(job_join(&a), thrd_success);
    WANT(job_join(&b), thrd_success);
}

__attribute__((constructor)) static void handover_init(void)
{
    handover.ctor_tasks = ntasks();
    mutexes();
    rwlocks();
    conds();
    semaphore();
    WANT(pthread_once(&handover.once, handover_once_routine), 0);
    call_once(&handover.c11_once, handover_once_routine);
    WANT(pthread_once(&handover.once, handover_once_routine), 0);
    call_once(&handover.c11_once, handover_once_routine);
    WANT(handover.once_runs, 2);
    barriers();
    spinlock();
    c11();
}
