/*
 * prog_sync_handover: synchronisation objects that glibc used before the
 * program started, used again afterwards (goshim issue 27: a GObject type
 * registered after start-up waited for ever on GType's rwlock, which
 * glibc had left in its idle write phase).
 *
 * The program is linked against libgoshim_handover.so, whose constructor
 * runs before libgoshim.so's and takes every kind of object through
 * glibc's own implementation (tests/progs/lib/handover.c), leaving each
 * idle. main then uses each again, from itself and from threads: locks
 * taken and released by main and by a thread, contended; condition waits
 * signalled and broadcast; the semaphore's count; the once routines not
 * run again; barrier rounds; and destroy. It prints, per object, what
 * each step returned, stopping at the first unexpected result. Every
 * object's check runs on a thread of its own that main waits for with a
 * deadline, so an object that hangs is reported, not the whole program.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>

#include "handover.h"
#include "prog_check.h"

enum {
    SHORT_MS = 2,    /* a wait that must time out */
    LONG_MS = 10000, /* a wait that must not */
    HUNG = -1000,    /* a thread that did not finish in time */
};

/* ---- steps: what each call returned, up to the first unexpected result ------------------ */

struct check {
    char out[1024];
    bool stopped;
};

static void say(struct check *c, const char *fmt, ...)
{
    size_t len = strlen(c->out);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->out + len, sizeof c->out - len, fmt, ap);
    va_end(ap);
}

static const char *err_name(int e)
{
    static const struct {
        int e;
        const char *name;
    } names[] = {{0, "0"},           {EBUSY, "EBUSY"},          {EDEADLK, "EDEADLK"},
                 {EPERM, "EPERM"},   {EAGAIN, "EAGAIN"},        {ETIMEDOUT, "ETIMEDOUT"},
                 {EINVAL, "EINVAL"}, {HUNG, "(did not finish)"}};
    static __thread char other[32];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].e == e)
            return names[i].name;
    snprintf(other, sizeof other, "%d", e);
    return other;
}

/* Record a step's result; false (and every later step skipped) if it is not want. */
static bool step(struct check *c, const char *name, int got, int want)
{
    if (c->stopped)
        return false;
    say(c, " %s=%s", name, err_name(got));
    if (got != want) {
        say(c, " (want %s)", err_name(want));
        c->stopped = true;
    }
    return !c->stopped;
}

/* ---- threads ----------------------------------------------------------------------------- */

struct job {
    pthread_t thread;
    int (*fn)(void *);
    void *obj;
    int result;
};

static void *job_main(void *p)
{
    struct job *j = p;
    j->result = j->fn(j->obj);
    return NULL;
}

static void job_start(struct job *j, int (*fn)(void *), void *obj)
{
    j->fn = fn;
    j->obj = obj;
    EXPECT(pthread_create(&j->thread, NULL, job_main, j), 0);
}

/* The job's result, or HUNG if it has not finished within LONG_MS and a bit. */
static int job_join(struct job *j)
{
    struct timespec d = in_ms(CLOCK_REALTIME, LONG_MS + 2000);
    if (pthread_timedjoin_np(j->thread, NULL, &d) != 0)
        return HUNG;
    return j->result;
}

static int on_thread(int (*fn)(void *), void *obj)
{
    struct job j;
    job_start(&j, fn, obj);
    return job_join(&j);
}

/* ---- mutexes ----------------------------------------------------------------------------- */

static int mx_timedlock_unlock(void *m)
{
    struct timespec d = in_ms(CLOCK_REALTIME, LONG_MS);
    int r = pthread_mutex_timedlock(m, &d);
    return r ? r : pthread_mutex_unlock(m);
}

static int mx_unlock(void *m)
{
    return pthread_mutex_unlock(m);
}

static void check_mutex(struct check *c, int i)
{
    pthread_mutex_t *m = &handover.mutex[i];
    int type = handover.mutex_type[i];
    struct job j;

    say(c, "mutex %s:", handover.mutex_name[i]);
    step(c, "trylock", pthread_mutex_trylock(m), 0);
    if (type == PTHREAD_MUTEX_RECURSIVE) {
        step(c, "trylock", pthread_mutex_trylock(m), 0);
        step(c, "unlock", pthread_mutex_unlock(m), 0);
    }
    if (type == PTHREAD_MUTEX_ERRORCHECK)
        step(c, "lock", pthread_mutex_lock(m), EDEADLK);
    if (type == PTHREAD_MUTEX_RECURSIVE || type == PTHREAD_MUTEX_ERRORCHECK)
        step(c, "thread-unlock", on_thread(mx_unlock, m), EPERM);
    step(c, "unlock", pthread_mutex_unlock(m), 0);
    step(c, "thread-lock", on_thread(mx_timedlock_unlock, m), 0);
    if (!step(c, "lock", pthread_mutex_lock(m), 0))
        return;
    job_start(&j, mx_timedlock_unlock, m);
    step(c, "unlock", pthread_mutex_unlock(m), 0);
    step(c, "contended-thread-lock", job_join(&j), 0);
    step(c, "destroy", pthread_mutex_destroy(m), 0);
}

/* ---- rwlocks ----------------------------------------------------------------------------- */

static int rw_timedrd_unlock(void *rw)
{
    struct timespec d = in_ms(CLOCK_REALTIME, LONG_MS);
    int r = pthread_rwlock_timedrdlock(rw, &d);
    return r ? r : pthread_rwlock_unlock(rw);
}

static int rw_timedwr_unlock(void *rw)
{
    struct timespec d = in_ms(CLOCK_REALTIME, LONG_MS);
    int r = pthread_rwlock_timedwrlock(rw, &d);
    return r ? r : pthread_rwlock_unlock(rw);
}

static int rw_tryrd(void *rw)
{
    int r = pthread_rwlock_tryrdlock(rw);
    return r ? r : pthread_rwlock_unlock(rw);
}

static int rw_trywr(void *rw)
{
    int r = pthread_rwlock_trywrlock(rw);
    return r ? r : pthread_rwlock_unlock(rw);
}

static void check_rwlock(struct check *c, int i)
{
    pthread_rwlock_t *rw = &handover.rwlock[i];
    struct job j;

    say(c, "rwlock %s:", handover.rwlock_name[i]);
    step(c, "trywrlock", pthread_rwlock_trywrlock(rw), 0);
    step(c, "thread-tryrdlock", on_thread(rw_tryrd, rw), EBUSY);
    step(c, "unlock", pthread_rwlock_unlock(rw), 0);
    step(c, "tryrdlock", pthread_rwlock_tryrdlock(rw), 0);
    step(c, "thread-rdlock", on_thread(rw_timedrd_unlock, rw), 0);
    step(c, "thread-trywrlock", on_thread(rw_trywr, rw), EBUSY);
    step(c, "unlock", pthread_rwlock_unlock(rw), 0);
    step(c, "thread-wrlock", on_thread(rw_timedwr_unlock, rw), 0);
    if (!step(c, "wrlock", pthread_rwlock_wrlock(rw), 0))
        return;
    job_start(&j, rw_timedrd_unlock, rw);
    step(c, "unlock", pthread_rwlock_unlock(rw), 0);
    step(c, "contended-thread-rdlock", job_join(&j), 0);
    if (!step(c, "rdlock", pthread_rwlock_rdlock(rw), 0))
        return;
    job_start(&j, rw_timedwr_unlock, rw);
    step(c, "unlock", pthread_rwlock_unlock(rw), 0);
    step(c, "contended-thread-wrlock", job_join(&j), 0);
    step(c, "trywrlock", pthread_rwlock_trywrlock(rw), 0);
    step(c, "unlock", pthread_rwlock_unlock(rw), 0);
    step(c, "destroy", pthread_rwlock_destroy(rw), 0);
}

/* ---- condition variables (pthread and C11) ---------------------------------------------- */

/* Waiters count themselves under the mutex before waiting, so a signaller that sees them all
 * counted, holding the mutex, knows they are inside the wait. */
struct waitgroup {
    pthread_cond_t *cond;
    clockid_t clock;
    cnd_t *cnd;
    int waiting, go;
};

static int cond_wait_go(void *p)
{
    struct waitgroup *w = p;
    struct timespec d = in_ms(w->clock, LONG_MS);
    int r = 0;
    pthread_mutex_lock(&handover.cond_mutex);
    w->waiting++;
    while (!w->go && r == 0)
        r = pthread_cond_timedwait(w->cond, &handover.cond_mutex, &d);
    pthread_mutex_unlock(&handover.cond_mutex);
    return r;
}

static int cnd_wait_go(void *p)
{
    struct waitgroup *w = p;
    struct timespec d = in_ms(CLOCK_REALTIME, LONG_MS);
    int r = thrd_success;
    mtx_lock(&handover.cnd_mtx);
    w->waiting++;
    while (!w->go && r == thrd_success)
        r = cnd_timedwait(w->cnd, &handover.cnd_mtx, &d);
    mtx_unlock(&handover.cnd_mtx);
    return r;
}

static void lock_waiters(struct waitgroup *w)
{
    if (w->cnd)
        mtx_lock(&handover.cnd_mtx);
    else
        pthread_mutex_lock(&handover.cond_mutex);
}

static void unlock_waiters(struct waitgroup *w)
{
    if (w->cnd)
        mtx_unlock(&handover.cnd_mtx);
    else
        pthread_mutex_unlock(&handover.cond_mutex);
}

/* n waiters; with the mutex held once all are waiting, wake them (one signal, then a
 * broadcast); the waiters' results, 0 each (thrd_success for C11). */
static int wake_waiters(struct waitgroup *w, int n)
{
    struct job j[2];
    int bad = 0;

    w->waiting = w->go = 0;
    for (int k = 0; k < n; k++)
        job_start(&j[k], w->cnd ? cnd_wait_go : cond_wait_go, w);
    for (;;) {
        lock_waiters(w);
        if (w->waiting == n)
            break;
        unlock_waiters(w);
        sched_yield();
    }
    w->go = 1;
    if (w->cnd)
        bad |= cnd_signal(w->cnd) != thrd_success;
    else
        bad |= pthread_cond_signal(w->cond);
    unlock_waiters(w);
    if (w->cnd)
        bad |= cnd_broadcast(w->cnd) != thrd_success;
    else
        bad |= pthread_cond_broadcast(w->cond);
    for (int k = 0; k < n; k++) {
        int r = job_join(&j[k]);
        if (r != 0)
            return r;
    }
    return bad ? EINVAL : 0;
}

static void check_cond(struct check *c, int i)
{
    pthread_cond_t *cv = &handover.cond[i];
    struct waitgroup w = {.cond = cv, .clock = handover.cond_clock[i]};
    struct timespec d;

    say(c, "cond %s:", handover.cond_name[i]);
    step(c, "signal", pthread_cond_signal(cv), 0);
    step(c, "broadcast", pthread_cond_broadcast(cv), 0);
    pthread_mutex_lock(&handover.cond_mutex);
    d = in_ms(w.clock, SHORT_MS);
    step(c, "timedwait", pthread_cond_timedwait(cv, &handover.cond_mutex, &d), ETIMEDOUT);
    pthread_mutex_unlock(&handover.cond_mutex);
    step(c, "wake-1", wake_waiters(&w, 1), 0);
    step(c, "wake-2", wake_waiters(&w, 2), 0);
    step(c, "destroy", pthread_cond_destroy(cv), 0);
}

static void check_cnd(struct check *c, int i)
{
    cnd_t *cv = &handover.cnd[i];
    struct waitgroup w = {.cnd = cv};
    struct timespec d;

    say(c, "cnd %s:", handover.cnd_name[i]);
    step(c, "signal", cnd_signal(cv), thrd_success);
    step(c, "broadcast", cnd_broadcast(cv), thrd_success);
    mtx_lock(&handover.cnd_mtx);
    d = in_ms(CLOCK_REALTIME, SHORT_MS);
    step(c, "timedwait", cnd_timedwait(cv, &handover.cnd_mtx, &d), thrd_timedout);
    mtx_unlock(&handover.cnd_mtx);
    step(c, "wake-1", wake_waiters(&w, 1), thrd_success);
    step(c, "wake-2", wake_waiters(&w, 2), thrd_success);
    cnd_destroy(cv);
    step(c, "destroy", 0, 0);
}

/* ---- C11 mutexes ------------------------------------------------------------------------- */

static int mtx_lock_unlock(void *m)
{
    int r = mtx_lock(m);
    return r != thrd_success ? r : mtx_unlock(m);
}

static void check_mtx(struct check *c, int i)
{
    mtx_t *m = &handover.mtx[i];
    int type = handover.mtx_type[i];
    struct timespec d = in_ms(CLOCK_REALTIME, LONG_MS);
    struct job j;

    say(c, "mtx %s:", handover.mtx_name[i]);
    step(c, "trylock", mtx_trylock(m), thrd_success);
    if (type & mtx_recursive) {
        step(c, "trylock", mtx_trylock(m), thrd_success);
        step(c, "unlock", mtx_unlock(m), thrd_success);
    }
    step(c, "unlock", mtx_unlock(m), thrd_success);
    if (type & mtx_timed) {
        step(c, "timedlock", mtx_timedlock(m, &d), thrd_success);
        step(c, "unlock", mtx_unlock(m), thrd_success);
    }
    step(c, "thread-lock", on_thread(mtx_lock_unlock, m), thrd_success);
    if (!step(c, "lock", mtx_lock(m), thrd_success))
        return;
    job_start(&j, mtx_lock_unlock, m);
    step(c, "unlock", mtx_unlock(m), thrd_success);
    step(c, "contended-thread-lock", job_join(&j), thrd_success);
    mtx_destroy(m);
}

/* ---- semaphore, once, barriers, spinlock ------------------------------------------------- */

static int sem_timedwait_job(void *s)
{
    struct timespec d = in_ms(CLOCK_REALTIME, LONG_MS);
    return sem_timedwait(s, &d) ? errno : 0;
}

static int sem_value(sem_t *s)
{
    int v = -1;
    sem_getvalue(s, &v);
    return v;
}

static void check_sem(struct check *c)
{
    sem_t *s = &handover.sem;
    struct job j;

    say(c, "sem:");
    step(c, "value", sem_value(s), 2);
    step(c, "trywait", sem_trywait(s) ? errno : 0, 0);
    step(c, "wait", sem_wait(s) ? errno : 0, 0);
    step(c, "trywait", sem_trywait(s) ? errno : 0, EAGAIN);
    job_start(&j, sem_timedwait_job, s);
    step(c, "post", sem_post(s) ? errno : 0, 0);
    step(c, "thread-wait", job_join(&j), 0);
    step(c, "post", sem_post(s) ? errno : 0, 0);
    step(c, "post", sem_post(s) ? errno : 0, 0);
    step(c, "value", sem_value(s), 2);
    step(c, "destroy", sem_destroy(s) ? errno : 0, 0);
}

static pthread_once_t fresh_once = PTHREAD_ONCE_INIT;

static int once_job(void *p)
{
    (void)p;
    call_once(&handover.c11_once, handover_once_routine);
    return pthread_once(&handover.once, handover_once_routine) |
           pthread_once(&fresh_once, handover_once_routine);
}

static void check_once(struct check *c)
{
    say(c, "once:");
    step(c, "runs-before", handover.once_runs, 2);
    step(c, "pthread_once", pthread_once(&handover.once, handover_once_routine), 0);
    call_once(&handover.c11_once, handover_once_routine);
    step(c, "runs", handover.once_runs, 2);
    step(c, "thread-once", on_thread(once_job, NULL), 0);
    step(c, "runs-with-a-fresh-once", handover.once_runs, 3);
    step(c, "fresh-again", pthread_once(&fresh_once, handover_once_routine), 0);
    step(c, "runs", handover.once_runs, 3);
}

enum { BARRIER_ROUNDS = 3 };

struct barrier_run {
    pthread_barrier_t *b;
    unsigned count;
    int arrived[BARRIER_ROUNDS];
};

/* Rounds of the barrier: PTHREAD_BARRIER_SERIAL_THREADs it got, or -1 if it left a round
 * before everyone arrived. */
static int barrier_job(void *p)
{
    struct barrier_run *br = p;
    int serial = 0;
    for (int r = 0; r < BARRIER_ROUNDS; r++) {
        __atomic_fetch_add(&br->arrived[r], 1, __ATOMIC_SEQ_CST);
        int rc = pthread_barrier_wait(br->b);
        if (rc == PTHREAD_BARRIER_SERIAL_THREAD)
            serial++;
        else if (rc != 0)
            return -rc;
        if (__atomic_load_n(&br->arrived[r], __ATOMIC_SEQ_CST) != (int)br->count)
            return -1;
    }
    return serial;
}

static void check_barrier(struct check *c, int i)
{
    struct barrier_run br = {.b = &handover.barrier[i], .count = handover.barrier_count[i]};
    struct job j[8];
    int serial;

    say(c, "barrier of %u:", br.count);
    for (unsigned k = 0; k + 1 < br.count; k++)
        job_start(&j[k], barrier_job, &br);
    serial = barrier_job(&br);
    for (unsigned k = 0; k + 1 < br.count; k++) {
        int r = job_join(&j[k]);
        serial = r < 0 || serial < 0 ? (r < 0 ? r : serial) : serial + r;
    }
    step(c, "serial-threads", serial, BARRIER_ROUNDS);
    step(c, "destroy", pthread_barrier_destroy(br.b), 0);
}

static int spin_try(void *l)
{
    int r = pthread_spin_trylock(l);
    return r ? r : pthread_spin_unlock(l);
}

static int spin_lock_unlock(void *l)
{
    int r = pthread_spin_lock(l);
    return r ? r : pthread_spin_unlock(l);
}

static void check_spin(struct check *c)
{
    pthread_spinlock_t *l = &handover.spin;

    say(c, "spinlock:");
    step(c, "trylock", pthread_spin_trylock(l), 0);
    step(c, "thread-trylock", on_thread(spin_try, (void *)l), EBUSY);
    step(c, "unlock", pthread_spin_unlock(l), 0);
    step(c, "lock", pthread_spin_lock(l), 0);
    step(c, "unlock", pthread_spin_unlock(l), 0);
    step(c, "thread-lock", on_thread(spin_lock_unlock, (void *)l), 0);
    step(c, "destroy", pthread_spin_destroy(l), 0);
}

/* ---- main -------------------------------------------------------------------------------- */

struct checker {
    struct check c;
    void (*fn)(struct check *, int);
    int i;
};

static int run_check(void *p)
{
    struct checker *k = p;
    k->fn(&k->c, k->i);
    return 0;
}

/* Run fn(i) on a thread of its own and print its line (noting when it did not finish: the
 * thread and its record are then left behind). */
static void check(void (*fn)(struct check *, int), int i)
{
    struct checker *k = calloc(1, sizeof *k);
    struct job *j = calloc(1, sizeof *j);
    CHECK(k != NULL && j != NULL);
    k->fn = fn;
    k->i = i;
    job_start(j, run_check, k);
    if (job_join(j) == HUNG) {
        printf("%s ... did not finish\n", k->c.out);
        fflush(stdout);
        return;
    }
    printf("%s\n", k->c.out);
    fflush(stdout); /* whole lines: goshim's statistics come out at exit */
    free(k);
    free(j);
}

static void sem1(struct check *c, int i)
{
    (void)i;
    check_sem(c);
}

static void once1(struct check *c, int i)
{
    (void)i;
    check_once(c);
}

static void spin1(struct check *c, int i)
{
    (void)i;
    check_spin(c);
}

int main(void)
{
    printf("constructor ran before the runtime: %s\n", handover.ctor_tasks == 1 ? "yes" : "no");
    printf("constructor: %s\n", handover.errors[0] ? handover.errors : "as expected");
    for (int i = 0; i < HO_MUTEXES; i++)
        check(check_mutex, i);
    for (int i = 0; i < HO_RWLOCKS; i++)
        check(check_rwlock, i);
    for (int i = 0; i < HO_CONDS; i++)
        check(check_cond, i);
    check(sem1, 0);
    check(once1, 0);
    for (int i = 0; i < HO_BARRIERS; i++)
        check(check_barrier, i);
    check(spin1, 0);
    for (int i = 0; i < HO_MTXS; i++)
        check(check_mtx, i);
    for (int i = 0; i < HO_CNDS; i++)
        check(check_cnd, i);
    return 0;
}
