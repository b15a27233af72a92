/*
 * Per-thread facts the Open POSIX Test Suite checks (issue 13, item 5).
 *
 *   prog_thread_facts joined    join and detach of a thread already joined: ESRCH
 *   prog_thread_facts masks     pthread_sigmask never adds SIGKILL or SIGSTOP, and reports
 *                               SIGURG blocked when the program blocked it
 *   prog_thread_facts pending   a new thread's pending set is empty while its creator has
 *                               SIGUSR1 pending (blocked)
 *   prog_thread_facts semintr   sem_timedwait fails with EINTR when a handler interrupts it
 *   prog_thread_facts forktid   a thread forks; the child locks a process-shared errorcheck
 *                               mutex; the parent thread's timed lock times out (it was
 *                               EDEADLK: both sides' thread had the same fake tid)
 *   prog_thread_facts forksetxid  with threads running, fork; the child calls seteuid (it
 *                               hung in glibc's set*id round)
 *   prog_thread_facts urg       SIGURG (goshim's preemption signal by default) as natively:
 *                               while two threads compute, never pending nor taken by a
 *                               zero-timeout sigtimedwait; then, with a handler of the
 *                               program and SIGURG blocked, a raised and a pthread_kill'ed
 *                               SIGURG wait pending (sigpending shows it, the handler does
 *                               not run), sigwait takes one, unblocking runs the handler once
 *   prog_thread_facts sigqueue  pthread_sigqueue to a parked and to a computing thread: the
 *                               handler runs on that thread with SI_QUEUE and the value
 *   prog_thread_facts psharedcancel  pthread_cancel of threads waiting on a process-shared
 *                               cond (untimed and timed, the canceller holding the mutex or
 *                               not): each ends cancelled, its cleanup handler run with the
 *                               mutex held (they never ended)
 *
 * Output is fixed for each mode; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

static void *nothing(void *arg)
{
    return arg;
}

static int mode_joined(void)
{
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, nothing, NULL), 0);
    EXPECT(pthread_join(t, NULL), 0);
    int j = pthread_join(t, NULL), d = pthread_detach(t);
    printf("second join: %s; detach after join: %s\n", j == ESRCH ? "ESRCH" : strerror(j),
           d == ESRCH ? "ESRCH" : strerror(d));
    return 0;
}

static int mode_masks(void)
{
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGKILL);
    sigaddset(&set, SIGSTOP);
    sigaddset(&set, SIGURG);
    EXPECT(pthread_sigmask(SIG_BLOCK, &set, NULL), 0);
    EXPECT(pthread_sigmask(SIG_SETMASK, NULL, &old), 0);
    printf("SIGKILL blocked: %s, SIGSTOP blocked: %s, SIGURG blocked: %s\n",
           sigismember(&old, SIGKILL) == 1 ? "yes" : "no",
           sigismember(&old, SIGSTOP) == 1 ? "yes" : "no",
           sigismember(&old, SIGURG) == 1 ? "yes" : "no");
    return 0;
}

static void *reports_pending(void *arg)
{
    sigset_t *pend = arg;
    CHECK(sigpending(pend) == 0);
    return NULL;
}

static int mode_pending(void)
{
    sigset_t usr1, mine, theirs;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    EXPECT(pthread_sigmask(SIG_BLOCK, &usr1, NULL), 0);
    EXPECT(pthread_kill(pthread_self(), SIGUSR1), 0);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, reports_pending, &theirs), 0);
    EXPECT(pthread_join(t, NULL), 0);
    CHECK(sigpending(&mine) == 0);
    printf("creator has SIGUSR1 pending: %s; the new thread: %s\n",
           sigismember(&mine, SIGUSR1) == 1 ? "yes" : "no",
           sigismember(&theirs, SIGUSR1) == 1 ? "yes" : "no");
    return 0;
}

static sem_t sem;
static volatile sig_atomic_t handled;

static void on_usr1(int sig)
{
    (void)sig;
    handled = 1;
}

static void *interrupts(void *arg)
{
    pthread_t main_thread = *(pthread_t *)arg;
    struct timespec ts = {0, 50 * 1000 * 1000}; /* pacing: it is in sem_timedwait by then */
    for (int i = 0; i < 100 && !handled; i++) {
        nanosleep(&ts, NULL);
        pthread_kill(main_thread, SIGUSR1);
    }
    return NULL;
}

static int mode_semintr(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1; /* no SA_RESTART */
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    EXPECT(sem_init(&sem, 0, 0), 0);
    pthread_t self = pthread_self(), t;
    EXPECT(pthread_create(&t, NULL, interrupts, &self), 0);
    struct timespec dl = in_ms(CLOCK_REALTIME, 10000);
    int r = sem_timedwait(&sem, &dl);
    int e = errno;
    EXPECT(pthread_join(t, NULL), 0);
    printf("sem_timedwait: %d %s\n", r, r == -1 && e == EINTR ? "EINTR" : strerror(e));
    return 0;
}

static void *forks_and_locks(void *arg)
{
    int *res = arg;
    pthread_mutex_t *m =
        mmap(NULL, sizeof *m, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    pthread_mutexattr_t a;
    EXPECT(pthread_mutexattr_init(&a), 0);
    EXPECT(pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK), 0);
    EXPECT(pthread_mutex_init(m, &a), 0);
    int up[2], down[2];
    CHECK(pipe(up) == 0 && pipe(down) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char c = pthread_mutex_lock(m) == 0 ? 'y' : 'n';
        CHECK(write(up[1], &c, 1) == 1);
        CHECK(read(down[0], &c, 1) == 1);
        pthread_mutex_unlock(m);
        _exit(0);
    }
    char c;
    CHECK(read(up[0], &c, 1) == 1);
    struct timespec dl = in_ms(CLOCK_REALTIME, 100);
    *res = c == 'y' ? pthread_mutex_timedlock(m, &dl) : -1;
    CHECK(write(down[1], "x", 1) == 1);
    CHECK(waitpid(pid, NULL, 0) == pid);
    return NULL;
}

static int mode_forktid(void)
{
    pthread_t t;
    int res = -1;
    EXPECT(pthread_create(&t, NULL, forks_and_locks, &res), 0);
    EXPECT(pthread_join(t, NULL), 0);
    printf("timed lock of the mutex the fork child holds: %s\n", res == ETIMEDOUT ? "ETIMEDOUT"
                                                                 : res < 0        ? "child failed"
                                                                                  : strerror(res));
    return 0;
}

static volatile int stop_spin;

static void *spin(void *arg)
{
    (void)arg;
    while (!stop_spin)
        ;
    return NULL;
}

static int mode_forksetxid(void)
{
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_create(&t[i], NULL, spin, NULL), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        _exit(seteuid(geteuid()) == 0 ? 0 : 1);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    stop_spin = 1;
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    printf("seteuid in the fork child: %s\n",
           WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "returned 0" : "failed");
    return 0;
}

/* ---- urg: goshim's own signal never shows; the program's own SIGURG is its own ---------- */

static volatile int computing;
static volatile sig_atomic_t urg_ran;
static pthread_t urg_main;
static volatile sig_atomic_t urg_elsewhere;

static void *compute(void *arg)
{
    volatile unsigned long n = 0;
    while (computing)
        n++;
    return arg;
}

static void on_urg(int sig)
{
    (void)sig;
    urg_ran++;
    if (!pthread_equal(pthread_self(), urg_main))
        urg_elsewhere = 1;
}

static void *kill_main_urg(void *arg)
{
    (void)arg;
    EXPECT(pthread_kill(urg_main, SIGURG), 0);
    return NULL;
}

static int mode_urg(void)
{
    urg_main = pthread_self();
    sigset_t urg, pend, none;
    sigemptyset(&urg);
    sigaddset(&urg, SIGURG);
    sigemptyset(&none);
    EXPECT(pthread_sigmask(SIG_BLOCK, &urg, NULL), 0);
    /* No handler: goshim preempts the computing threads meanwhile. */
    pthread_t t[2];
    computing = 1;
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_create(&t[i], NULL, compute, NULL), 0);
    int seen = 0;
    long rounds = scaled(2000);
    for (long i = 0; i < rounds; i++) {
        CHECK(sigpending(&pend) == 0);
        if (sigismember(&pend, SIGURG) == 1)
            seen++;
        struct timespec zero = {0, 0};
        if (sigtimedwait(&urg, NULL, &zero) == SIGURG)
            seen++;
        sched_yield();
    }
    computing = 0;
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    printf("urg: never pending nor taken while threads compute: %s\n", seen ? "no" : "yes");
    /* The program's own SIGURG, blocked: pending, taken by sigwait, handled on unblock. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_urg;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGURG, &sa, NULL) == 0);
    CHECK(raise(SIGURG) == 0);
    CHECK(sigpending(&pend) == 0);
    int raised = sigismember(&pend, SIGURG) == 1;
    int sig = 0;
    EXPECT(sigwait(&urg, &sig), 0);
    CHECK(sigpending(&pend) == 0);
    int taken = sig == SIGURG && sigismember(&pend, SIGURG) == 0;
    pthread_t k;
    EXPECT(pthread_create(&k, NULL, kill_main_urg, NULL), 0);
    EXPECT(pthread_join(k, NULL), 0);
    CHECK(sigpending(&pend) == 0);
    int killed = sigismember(&pend, SIGURG) == 1;
    int before = urg_ran;
    sigset_t old;
    EXPECT(pthread_sigmask(SIG_UNBLOCK, &urg, &old), 0);
    int ran = urg_ran - before;
    printf("urg: raised while blocked: pending %s, handler ran %s; sigwait took it: %s; "
           "pthread_kill'ed: pending %s; unblocked: handler ran %d time(s), on this thread: "
           "%s; the old set had it: %s\n",
           raised ? "yes" : "no", before ? "yes" : "no", taken ? "yes" : "no",
           killed ? "yes" : "no", ran, urg_elsewhere ? "no" : "yes",
           sigismember(&old, SIGURG) == 1 ? "yes" : "no");
    return 0;
}

/* ---- sigqueue: pthread_sigqueue reaches its thread with its value ---------------------- */

static sem_t queued_sem, release_sem;
static pthread_t queued_to;
static volatile int queued_ok, queued_code, queued_value;

static void on_queued(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    queued_ok = pthread_equal(pthread_self(), queued_to);
    queued_code = si->si_code;
    queued_value = si->si_value.sival_int;
    sem_post(&queued_sem);
}

static void *parked_target(void *arg)
{
    (void)arg;
    while (sem_wait(&release_sem) != 0)
        ;
    return NULL;
}

static void *computing_target(void *arg)
{
    (void)arg;
    volatile unsigned long n = 0;
    while (computing)
        n++;
    return NULL;
}

static int mode_sigqueue(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_queued;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR2, &sa, NULL) == 0);
    EXPECT(sem_init(&queued_sem, 0, 0), 0);
    EXPECT(sem_init(&release_sem, 0, 0), 0);
    int ok[2];
    for (int round = 0; round < 2; round++) {
        pthread_t t;
        computing = 1;
        EXPECT(pthread_create(&t, NULL, round == 0 ? parked_target : computing_target, NULL), 0);
        queued_to = t;
        queued_ok = 0;
        union sigval v = {.sival_int = 40 + round};
        EXPECT(pthread_sigqueue(t, SIGUSR2, v), 0);
        while (sem_wait(&queued_sem) != 0)
            ;
        ok[round] = queued_ok && queued_code == SI_QUEUE && queued_value == 40 + round;
        computing = 0;
        CHECK(sem_post(&release_sem) == 0);
        EXPECT(pthread_join(t, NULL), 0);
        if (round == 1) /* the computing one did not wait on it */
            while (sem_trywait(&release_sem) == 0)
                ;
    }
    printf("pthread_sigqueue: to a parked thread: %s; to a computing one: %s\n",
           ok[0] ? "yes" : "no", ok[1] ? "yes" : "no");
    return 0;
}

/* ---- psharedcancel: a wait on a process-shared cond is a cancellation point ------------ */

static pthread_mutex_t ps_mu;
static pthread_cond_t ps_cv;
static volatile int ps_timed, ps_cleanup_held, ps_waiting;

static void ps_cleanup(void *arg)
{
    (void)arg;
    /* An errorcheck mutex: unlocking it succeeds only for its owner. */
    ps_cleanup_held = pthread_mutex_unlock(&ps_mu) == 0;
}

static void *ps_waiter(void *arg)
{
    (void)arg;
    EXPECT(pthread_mutex_lock(&ps_mu), 0);
    pthread_cleanup_push(ps_cleanup, NULL);
    for (;;) {          /* nobody signals: only the cancellation ends this */
        ps_waiting = 1; /* with the mutex held: whoever takes it next finds it in the wait */
        if (ps_timed) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 30;
            pthread_cond_timedwait(&ps_cv, &ps_mu, &ts);
        } else {
            pthread_cond_wait(&ps_cv, &ps_mu);
        }
    }
    pthread_cleanup_pop(0);
    return NULL;
}

static int mode_psharedcancel(void)
{
    pthread_mutexattr_t ma;
    pthread_condattr_t ca;
    EXPECT(pthread_mutexattr_init(&ma), 0);
    EXPECT(pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK), 0);
    EXPECT(pthread_condattr_init(&ca), 0);
    EXPECT(pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_mutex_init(&ps_mu, &ma), 0);
    EXPECT(pthread_cond_init(&ps_cv, &ca), 0);
    int good = 0;
    for (int round = 0; round < 4; round++) {
        ps_timed = round & 1;
        ps_cleanup_held = ps_waiting = 0;
        pthread_t t;
        EXPECT(pthread_create(&t, NULL, ps_waiter, NULL), 0);
        /* Once main has the mutex, the waiter is in the wait (it let the mutex go there). */
        for (;;) {
            EXPECT(pthread_mutex_lock(&ps_mu), 0);
            if (ps_waiting)
                break;
            EXPECT(pthread_mutex_unlock(&ps_mu), 0);
            sched_yield();
        }
        if (round >= 2) /* cancelled without the mutex held */
            EXPECT(pthread_mutex_unlock(&ps_mu), 0);
        EXPECT(pthread_cancel(t), 0);
        if (round < 2)
            EXPECT(pthread_mutex_unlock(&ps_mu), 0);
        void *ret = NULL;
        EXPECT(pthread_join(t, &ret), 0);
        if (ret == PTHREAD_CANCELED && ps_cleanup_held)
            good++;
    }
    printf("process-shared cond: cancelled in its wait, cleanup with the mutex held: %d of 4\n",
           good);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "joined"))
        return mode_joined();
    if (!strcmp(mode, "masks"))
        return mode_masks();
    if (!strcmp(mode, "pending"))
        return mode_pending();
    if (!strcmp(mode, "semintr"))
        return mode_semintr();
    if (!strcmp(mode, "forktid"))
        return mode_forktid();
    if (!strcmp(mode, "forksetxid"))
        return mode_forksetxid();
    if (!strcmp(mode, "urg"))
        return mode_urg();
    if (!strcmp(mode, "sigqueue"))
        return mode_sigqueue();
    if (!strcmp(mode, "psharedcancel"))
        return mode_psharedcancel();
    fprintf(stderr, "usage: prog_thread_facts joined|masks|pending|semintr|forktid|forksetxid|urg|"
                    "sigqueue|psharedcancel\n");
    return 2;
}
