/*
 * Signals sent to the process reach the thread the kernel would choose
 * (issue 13): the main thread if it does not block the signal, else one
 * that does not; a parked thread's wait is interrupted.
 *
 *   prog_procsig sleep      main in sleep(5), a child process kills it with SIGUSR1 once the
 *                           main thread is about to sleep (and again every 20 ms): sleep
 *                           returns early, the handler ran on the main thread
 *   prog_procsig sem        main in sem_wait, two threads compute, an ITIMER_REAL SIGALRM
 *                           handler without SA_RESTART: sem_wait fails with EINTR, 10 rounds
 *   prog_procsig pause [US] alarm-style: main in pause() while two threads compute; the
 *                           alarm after US microseconds (50000)
 *   prog_procsig flock [US] the same in a flock that waits for a lock of the process's own
 *   prog_procsig syspause [US] the same in syscall(SYS_pause)
 *   prog_procsig join       main in pthread_join; SIGINT from a child process runs the
 *                           handler on the main thread, which lets the joined thread end
 *   prog_procsig restart    SIGTERM (sent again and again by a child) during a read from a
 *                           pipe: with SA_RESTART the read goes on until a byte comes
 *   prog_procsig eintr      the same without SA_RESTART: the read fails with EINTR
 *   prog_procsig onlyone    every thread but one blocks SIGUSR1; that one is parked in
 *                           sem_wait: the process's SIGUSR1 runs its handler there
 *   prog_procsig sigwait    a worker in sigwaitinfo gets a sigqueue'd SIGUSR2 (si_code and
 *                           value intact) that every other thread blocks
 *   prog_procsig sigchld    SIGCHLD of a child that exits (another thread forks them,
 *                           blocking SIGCHLD) interrupts the main thread's nanosleep
 *   prog_procsig execpend   a signal pending for the thread (blocked) survives exec: the
 *                           exec'd image (this program, mode execcheck) sees it pending
 *   prog_procsig parked     kill() of the own process while no thread takes the signal
 *                           (all block it), then a new thread unblocks it: its handler runs
 *                           there, every round (it was lost: goshim's router, not the main
 *                           thread, may not queue a SI_USER signal back to the process)
 *   prog_procsig lastthread the only thread that takes SIGUSR1 spins; main kills the
 *                           process, tells it to stop and joins it: the handler ran before
 *                           it ended (natively kill() picks it at once; under goshim the
 *                           signal reached the router after the thread had ended, and
 *                           nobody took it)
 *   prog_procsig newm       main blocks SIGUSR1, 32 threads that take it block in flock (the
 *                           P handed off: new OS threads start) while a child floods the
 *                           process with SIGUSR1: every handler runs on a thread of the
 *                           program (under goshim a new OS thread, before it knew which M it
 *                           was, ran one on no thread at all, in mode sleep too)
 *   prog_procsig timer      a POSIX timer (SIGEV_SIGNAL, every 100 us) for 300 ms while
 *                           main sleeps and 4 threads wait on a condition: its handler sees
 *                           every expiration the kernel counts, as a signal or an overrun
 *                           (goshim lost one in eight), each with SI_TIMER (some came as a
 *                           tgkill's)
 *   prog_procsig recycle    threads of several stack sizes take a process signal each (the
 *                           router keeps its siginfo in their records), detach themselves
 *                           and end, again and again: their stack blocks, with the records
 *                           in them, are reused (a stale siginfo pointer in a reused record
 *                           was freed twice: pthread_detach/4-3 aborted)
 *
 * The waits whose own mask lets the signal through (ppoll, pselect,
 * epoll_pwait, epoll_pwait2) are prog_procsig_masked's.
 *
 * Output is fixed for each mode; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "parked.h"
#include "prog_check.h"
#include "procsig.h"

static volatile int stop;

static void *spin(void *arg)
{
    (void)arg;
    volatile unsigned long n = 0;
    while (!stop)
        n++;
    return NULL;
}

static int mode_sleep(void)
{
    install(SIGUSR1, note, 0);
    int fd = killer(SIGUSR1, 100);
    close(fd);
    unsigned left = sleep(5);
    end_killer();
    printf("sleep returned early: %s; handler ran on the main thread: %s\n",
           left > 0 ? "yes" : "no", on_main && !on_other ? "yes" : "no");
    return 0;
}

static int mode_sem(void)
{
    pthread_t t[2];
    sem_t s;
    install(SIGALRM, note, 0);
    EXPECT(sem_init(&s, 0, 0), 0);
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_create(&t[i], NULL, spin, NULL), 0);
    int eintr = 0;
    for (int i = 0; i < 10; i++) {
        struct itimerval it = {{0, 0}, {0, 50 * 1000}};
        CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
        int r = sem_wait(&s);
        if (r == -1 && errno == EINTR)
            eintr++;
    }
    stop = 1;
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    printf("sem_wait failed with EINTR %d times of 10; handlers on the main thread: %s\n", eintr,
           on_main && !on_other ? "yes" : "no");
    return 0;
}

/* pause and flock: main waits in the call while two threads compute; SIGALRM's handler
 * (without SA_RESTART) runs on main after us and ends the call with EINTR. An alarm that
 * comes before main is on its way into the call (its OS thread was kept off the CPU for
 * longer than us, on a loaded machine) would leave it waiting for ever, natively too: that
 * one's handler sets the alarm again. Once calling is set, the signal must end the call,
 * however soon it comes. */
static pthread_t alarm_spinners[2];
static volatile sig_atomic_t calling;
static long alarm_us;

static void set_alarm(long us)
{
    struct itimerval it = {{0, 0}, {us / 1000000, us % 1000000}};
    CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
}

static void alarm_note(int sig)
{
    note(sig);
    if (!calling)
        set_alarm(alarm_us); /* async-signal-safe */
}

static void alarm_begin(long us)
{
    install(SIGALRM, alarm_note, 0);
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_create(&alarm_spinners[i], NULL, spin, NULL), 0);
    /* A time slice of its own from here (under goshim, which preempts a thread when its
     * slice is used up): between the timer and the call it is not put aside for longer
     * than the alarm, for its handler to run before the call. */
    sched_yield();
    alarm_us = us;
    set_alarm(us);
}

static int alarm_end(const char *call, int r, int e)
{
    stop = 1;
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_join(alarm_spinners[i], NULL), 0);
    printf("%s returned %d %s; handler on the main thread: %s\n", call, r,
           r == -1 && e == EINTR ? "EINTR" : "?", on_main && !on_other ? "yes" : "no");
    return 0;
}

static int mode_pause(long us)
{
    alarm_begin(us);
    calling = 1;
    int r = pause();
    return alarm_end("pause", r, errno);
}

/* The same through syscall() (Rust's std and hand-written code make raw calls). */
static int mode_syspause(long us)
{
    alarm_begin(us);
    calling = 1;
    int r = (int)syscall(SYS_pause);
    return alarm_end("syscall(SYS_pause)", r, errno);
}

/* The same for a flock that another open file description's lock makes wait (the
 * lock-with-a-timeout idiom). */
static int mode_flock(long us)
{
    char tmpl[] = "/tmp/prog_procsig_XXXXXX";
    int held = mkstemp(tmpl);
    CHECK(held >= 0);
    int fd = open(tmpl, O_RDWR); /* a description of its own */
    CHECK(fd >= 0);
    unlink(tmpl);
    CHECK(flock(held, LOCK_EX) == 0);
    alarm_begin(us);
    calling = 1;
    int r = flock(fd, LOCK_EX);
    return alarm_end("flock", r, errno);
}

static sem_t release;

static void let_go(int sig)
{
    note(sig);
    sem_post(&release); /* async-signal-safe */
}

static void *waits_for_release(void *arg)
{
    (void)arg;
    while (sem_wait(&release) != 0)
        ;
    return NULL;
}

/* ---- parked, lastthread: a process signal is never lost ------------------------------- */

static volatile sig_atomic_t took;
static sem_t took_sem;

static void count_took(int sig)
{
    (void)sig;
    took++;
    sem_post(&took_sem);
}

static void block_usr1(int how)
{
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    CHECK(pthread_sigmask(how, &s, NULL) == 0);
}

static void *unblock_and_take(void *arg)
{
    (void)arg;
    block_usr1(SIG_UNBLOCK); /* the signal left pending for the process comes here now */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    while (sem_timedwait(&took_sem, &ts) != 0)
        if (errno == ETIMEDOUT)
            return (void *)1;
    return NULL;
}

/* SIGUSR1 shows as pending (polled for up to 2 s: natively it is at once). */
static bool usr1_pending_within_2s(void)
{
    for (int i = 0; i < 2000; i++) {
        sigset_t s;
        CHECK(sigpending(&s) == 0);
        if (sigismember(&s, SIGUSR1))
            return true;
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return false;
}

static int mode_parked(void)
{
    long rounds = scaled(50), lost = 0;
    CHECK(sem_init(&took_sem, 0, 0) == 0);
    install(SIGUSR1, count_took, 0);
    block_usr1(SIG_BLOCK); /* every thread blocks it, until a new one unblocks it */
    for (long i = 0; i < rounds; i++) {
        CHECK(kill(getpid(), SIGUSR1) == 0); /* nobody takes it: pending for the process */
        if (!usr1_pending_within_2s()) {
            lost++;
            continue;
        }
        pthread_t t;
        void *r;
        CHECK(pthread_create(&t, NULL, unblock_and_take, NULL) == 0);
        CHECK(pthread_join(t, &r) == 0);
        lost += r != NULL;
    }
    printf("parked: a signal nobody took at once was handled later: %s\n",
           lost == 0 ? "every time" : "not always");
    if (lost)
        fprintf(stderr, "parked: %ld of %ld lost\n", lost, rounds);
    return 0;
}

static volatile int stop_spinning;

static void *spin_until_told(void *arg)
{
    (void)arg;
    block_usr1(SIG_UNBLOCK);
    sem_post(&release);
    while (!stop_spinning)
        sched_yield();
    return NULL;
}

static int mode_lastthread(void)
{
    long rounds = scaled(300), lost = 0;
    CHECK(sem_init(&took_sem, 0, 0) == 0);
    CHECK(sem_init(&release, 0, 0) == 0);
    install(SIGUSR1, count_took, 0);
    block_usr1(SIG_BLOCK);
    for (long i = 0; i < rounds; i++) {
        pthread_t t;
        stop_spinning = 0;
        took = 0;
        CHECK(pthread_create(&t, NULL, spin_until_told, NULL) == 0);
        while (sem_wait(&release) != 0)
            ;
        CHECK(kill(getpid(), SIGUSR1) == 0); /* only t takes it */
        stop_spinning = 1;
        CHECK(pthread_join(t, NULL) == 0);
        if (took != 1) {
            lost++;
            fprintf(stderr, "lastthread: round %ld: the handler ran %d times\n", i, (int)took);
            sigset_t s;
            CHECK(sigpending(&s) == 0);
            if (sigismember(&s, SIGUSR1)) { /* left for the process: take it, go on */
                sigset_t w;
                sigemptyset(&w);
                sigaddset(&w, SIGUSR1);
                int sig;
                sigwait(&w, &sig);
            }
        }
        while (sem_trywait(&took_sem) == 0)
            ;
    }
    printf("lastthread: handled by the thread before it ended: %s\n",
           lost == 0 ? "every time" : "not always");
    if (lost)
        fprintf(stderr, "lastthread: %ld of %ld lost\n", lost, rounds);
    return 0;
}

static int mode_join(void)
{
    pthread_t t;
    EXPECT(sem_init(&release, 0, 0), 0);
    install(SIGINT, let_go, SA_RESTART);
    EXPECT(pthread_create(&t, NULL, waits_for_release, NULL), 0);
    int fd = killer(SIGINT, 1);
    close(fd);
    EXPECT(pthread_join(t, NULL), 0);
    end_killer();
    printf("join returned; handler ran on the main thread: %s\n",
           on_main && !on_other ? "yes" : "no");
    return 0;
}

static int read_under_signals(int flags)
{
    int p[2];
    CHECK(pipe(p) == 0);
    install(SIGTERM, note, flags);
    pid_t parent = getpid();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        for (int i = 0; i < 10; i++) {
            kill(parent, SIGTERM);
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        CHECK(write(p[1], "x", 1) == 1);
        _exit(0);
    }
    close(p[1]);
    char c;
    ssize_t n = read(p[0], &c, 1);
    int e = errno;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    if (flags & SA_RESTART)
        printf("SA_RESTART: read returned %zd after the handler ran: %s, on the main thread: "
               "%s\n",
               n, handled > 0 ? "yes" : "no", on_main && !on_other ? "yes" : "no");
    else
        printf("no SA_RESTART: read returned %zd %s; handler on the main thread: %s\n", n,
               n == -1 && e == EINTR ? "EINTR" : "?", on_main && !on_other ? "yes" : "no");
    return 0;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int ready;

static void *parked_taker(void *arg)
{
    (void)arg;
    sigset_t none;
    sigemptyset(&none);
    EXPECT(pthread_sigmask(SIG_SETMASK, &none, NULL), 0);
    expected = pthread_self();
    EXPECT(pthread_mutex_lock(&mu), 0);
    ready = 1;
    EXPECT(pthread_cond_broadcast(&cv), 0);
    EXPECT(pthread_mutex_unlock(&mu), 0);
    while (sem_wait(&release) != 0) /* parked until the handler posts */
        ;
    return NULL;
}

static int mode_onlyone(void)
{
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    EXPECT(sem_init(&release, 0, 0), 0);
    install(SIGUSR1, let_go, SA_RESTART);
    EXPECT(pthread_sigmask(SIG_BLOCK, &usr1, NULL), 0);
    pthread_t t[3];
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_create(&t[i], NULL, spin, NULL), 0); /* they inherit the block */
    EXPECT(pthread_create(&t[2], NULL, parked_taker, NULL), 0);
    EXPECT(pthread_mutex_lock(&mu), 0);
    while (!ready)
        EXPECT(pthread_cond_wait(&cv, &mu), 0);
    EXPECT(pthread_mutex_unlock(&mu), 0);
    CHECK(kill(getpid(), SIGUSR1) == 0);
    EXPECT(pthread_join(t[2], NULL), 0);
    stop = 1;
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    printf("handler ran on the only thread that takes it: %s\n",
           on_main && !on_other ? "yes" : "no");
    return 0;
}

static void *sigwaiter(void *arg)
{
    sigset_t *set = arg;
    siginfo_t si;
    EXPECT(pthread_mutex_lock(&mu), 0);
    ready = 1;
    EXPECT(pthread_cond_broadcast(&cv), 0);
    EXPECT(pthread_mutex_unlock(&mu), 0);
    int r = sigwaitinfo(set, &si);
    printf("sigwaitinfo: %s, si_code SI_QUEUE: %s, value %d\n", r == SIGUSR2 ? "SIGUSR2" : "other",
           si.si_code == SI_QUEUE ? "yes" : "no", si.si_value.sival_int);
    return NULL;
}

static int mode_sigwait(void)
{
    static sigset_t usr2;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    EXPECT(pthread_sigmask(SIG_BLOCK, &usr2, NULL), 0);
    pthread_t t[3];
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_create(&t[i], NULL, spin, NULL), 0);
    EXPECT(pthread_create(&t[2], NULL, sigwaiter, &usr2), 0);
    EXPECT(pthread_mutex_lock(&mu), 0);
    while (!ready)
        EXPECT(pthread_cond_wait(&cv, &mu), 0);
    EXPECT(pthread_mutex_unlock(&mu), 0);
    union sigval v = {.sival_int = 42};
    CHECK(sigqueue(getpid(), SIGUSR2, v) == 0);
    EXPECT(pthread_join(t[2], NULL), 0);
    stop = 1;
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    return 0;
}

/* Children exit one after another, 20 ms apart, until the main thread is done: one of
 * their SIGCHLDs comes while it sleeps. This thread blocks SIGCHLD, the main one takes it. */
static void *forks_children(void *arg)
{
    (void)arg;
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    EXPECT(pthread_sigmask(SIG_BLOCK, &chld, NULL), 0);
    for (int i = 0; i < 200 && !stop; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0)
            _exit(0);
        CHECK(waitpid(pid, NULL, 0) == pid);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static int mode_sigchld(void)
{
    install(SIGCHLD, note, 0);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, forks_children, NULL), 0);
    struct timespec ts = {5, 0}, rem = {0, 0};
    int r = nanosleep(&ts, &rem);
    int e = errno;
    stop = 1;
    EXPECT(pthread_join(t, NULL), 0);
    printf("nanosleep returned %d %s, time left: %s; handler on the main thread: %s\n", r,
           r == -1 && e == EINTR ? "EINTR" : "?", rem.tv_sec >= 1 ? "yes" : "no",
           on_main && !on_other ? "yes" : "no");
    return 0;
}

static int mode_execpend(char *self)
{
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    EXPECT(pthread_sigmask(SIG_BLOCK, &usr1, NULL), 0);
    EXPECT(pthread_kill(pthread_self(), SIGUSR1), 0);
    char *argv[] = {self, "execcheck", NULL};
    fflush(stdout);
    execv(self, argv);
    perror("execv");
    return 1;
}

static int mode_execcheck(void)
{
    sigset_t pend, mask;
    CHECK(sigpending(&pend) == 0);
    EXPECT(pthread_sigmask(SIG_SETMASK, NULL, &mask), 0);
    printf("after exec: SIGUSR1 pending: %s, blocked: %s\n",
           sigismember(&pend, SIGUSR1) == 1 ? "yes" : "no",
           sigismember(&mask, SIGUSR1) == 1 ? "yes" : "no");
    return 0;
}

/* ---- newm: handlers run on threads of the program only -------------------------------- */

static __thread int a_thread; /* set by each thread of the program before it takes SIGUSR1 */
static volatile sig_atomic_t on_none;
static int lockpath_fd;

static void note_thread(int sig)
{
    (void)sig;
    handled++;
    if (!a_thread)
        on_none = 1;
}

static void *flock_waiter(void *arg)
{
    (void)arg;
    a_thread = 1;
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    EXPECT(pthread_sigmask(SIG_UNBLOCK, &usr1, NULL), 0);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", lockpath_fd);
    int fd = open(path, O_RDWR); /* a description of its own: flock blocks on main's lock */
    CHECK(fd >= 0);
    CHECK(flock(fd, LOCK_EX) == 0); /* SA_RESTART: a handler does not end it */
    CHECK(flock(fd, LOCK_UN) == 0);
    close(fd);
    return NULL;
}

static int mode_newm(void)
{
    enum { NT = 32 };
    a_thread = 1;
    install(SIGUSR1, note_thread, SA_RESTART);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    EXPECT(pthread_sigmask(SIG_BLOCK, &usr1, NULL), 0); /* the threads take it, not main */
    char tmpl[] = "/tmp/prog_procsig_XXXXXX";
    lockpath_fd = mkstemp(tmpl);
    CHECK(lockpath_fd >= 0);
    unlink(tmpl);
    CHECK(flock(lockpath_fd, LOCK_EX) == 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        for (;;) { /* until killed */
            kill(parent, SIGUSR1);
            struct timespec ts = {0, 20 * 1000}; /* pacing, not synchronisation */
            nanosleep(&ts, NULL);
        }
    }
    pthread_t t[NT];
    for (int i = 0; i < NT; i++)
        EXPECT(pthread_create(&t[i], NULL, flock_waiter, NULL), 0);
    CHECK(flock(lockpath_fd, LOCK_UN) == 0);
    for (int i = 0; i < NT; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    sigset_t none;
    sigemptyset(&none);
    while (!handled) /* the flood goes on: one comes here at the latest */
        sigsuspend(&none);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    printf("newm: handlers ran on threads of the program only: %s\n", on_none ? "no" : "yes");
    return 0;
}

/* ---- recycle: records in reused stack blocks start clean ------------------------------- */

static sem_t rc_ready, rc_go, rc_done;

static void *recycled(void *arg)
{
    (void)arg;
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    EXPECT(pthread_sigmask(SIG_UNBLOCK, &usr1, NULL), 0);
    CHECK(sem_post(&rc_ready) == 0);
    while (sem_wait(&rc_go) != 0) /* the signal comes here meanwhile */
        ;
    EXPECT(pthread_detach(pthread_self()), 0);
    CHECK(sem_post(&rc_done) == 0);
    return NULL;
}

static int mode_recycle(void)
{
    install(SIGUSR1, note, SA_RESTART);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    EXPECT(pthread_sigmask(SIG_BLOCK, &usr1, NULL), 0);
    EXPECT(sem_init(&rc_ready, 0, 0), 0);
    EXPECT(sem_init(&rc_go, 0, 0), 0);
    EXPECT(sem_init(&rc_done, 0, 0), 0);
    static const size_t sizes[] = {0, 0, 64 << 10, 0};
    long rounds = scaled(200), n = 0;
    for (long i = 0; i < rounds; i++) {
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            pthread_attr_t a;
            EXPECT(pthread_attr_init(&a), 0);
            if (sizes[k])
                EXPECT(pthread_attr_setstacksize(&a, sizes[k]), 0);
            pthread_t t;
            EXPECT(pthread_create(&t, &a, recycled, NULL), 0);
            EXPECT(pthread_attr_destroy(&a), 0);
            while (sem_wait(&rc_ready) != 0)
                ;
            int before = handled;
            CHECK(kill(getpid(), SIGUSR1) == 0); /* only that thread takes it */
            while (handled == before)            /* it runs the handler, parked or not */
                sched_yield();
            CHECK(sem_post(&rc_go) == 0);
            while (sem_wait(&rc_done) != 0)
                ;
            n++;
        }
    }
    printf("recycle: %s\n", n == rounds * 4 ? "every thread took its signal and ended" : "no");
    return 0;
}

static volatile sig_atomic_t tm_calls, tm_foreign;
static volatile long tm_overruns;

static void on_timer(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    tm_calls++;
    if (si->si_code == SI_TIMER)
        tm_overruns += si->si_overrun;
    else
        tm_foreign++;
}

static long ns_between(const struct timespec *a, const struct timespec *b)
{
    return (b->tv_sec - a->tv_sec) * 1000000000L + (b->tv_nsec - a->tv_nsec);
}

static int mode_timer(void)
{
    const long period = 100000, run = 300000000; /* ns */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_timer;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    EXPECT(sigaction(SIGRTMIN + 2, &sa, NULL), 0);
    EXPECT(parked_start(4), 0);
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = SIGRTMIN + 2;
    timer_t t;
    EXPECT(timer_create(CLOCK_MONOTONIC, &ev, &t), 0);
    struct itimerspec on = {{0, period}, {0, period}}, off;
    memset(&off, 0, sizeof off);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    EXPECT(timer_settime(t, 0, &on, NULL), 0);
    do {
        struct timespec nap = {0, 10000000};
        nanosleep(&nap, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
    } while (ns_between(&t0, &t1) < run);
    EXPECT(timer_settime(t, 0, &off, NULL), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    EXPECT(timer_delete(t), 0);
    parked_stop();
    /* The kernel's count from arm to disarm; the last few may still be on their way. */
    long want = ns_between(&t0, &t1) / period;
    long counted = (long)(tm_calls - tm_foreign) + tm_overruns;
    bool all = counted >= want * 97 / 100 - 5 && counted <= want + 1;
    printf("timer: every expiration counted: %s; SI_TIMER every time: %s\n", all ? "yes" : "no",
           tm_calls > 0 && tm_foreign == 0 ? "yes" : "no");
    if (!all)
        fprintf(stderr, "timer: %ld counted (%d signals, %ld overruns), %ld expected\n", counted,
                (int)tm_calls, tm_overruns, want);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    expected = pthread_self();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(mode, "sleep"))
        return mode_sleep();
    if (!strcmp(mode, "sem"))
        return mode_sem();
    if (!strcmp(mode, "pause"))
        return mode_pause(argc > 2 ? atol(argv[2]) : 50 * 1000);
    if (!strcmp(mode, "flock"))
        return mode_flock(argc > 2 ? atol(argv[2]) : 50 * 1000);
    if (!strcmp(mode, "syspause"))
        return mode_syspause(argc > 2 ? atol(argv[2]) : 50 * 1000);
    if (!strcmp(mode, "join"))
        return mode_join();
    if (!strcmp(mode, "restart"))
        return read_under_signals(SA_RESTART);
    if (!strcmp(mode, "eintr"))
        return read_under_signals(0);
    if (!strcmp(mode, "onlyone"))
        return mode_onlyone();
    if (!strcmp(mode, "sigwait"))
        return mode_sigwait();
    if (!strcmp(mode, "sigchld"))
        return mode_sigchld();
    if (!strcmp(mode, "execpend"))
        return mode_execpend(argv[0]);
    if (!strcmp(mode, "execcheck"))
        return mode_execcheck();
    if (!strcmp(mode, "parked"))
        return mode_parked();
    if (!strcmp(mode, "lastthread"))
        return mode_lastthread();
    if (!strcmp(mode, "newm"))
        return mode_newm();
    if (!strcmp(mode, "recycle"))
        return mode_recycle();
    if (!strcmp(mode, "timer"))
        return mode_timer();
    fprintf(stderr,
            "usage: prog_procsig sleep|sem|pause|flock|syspause|join|restart|eintr|onlyone|sigwait|"
            "sigchld|execpend|parked|lastthread|newm|recycle|timer (ppoll and friends: "
            "prog_procsig_masked)\n");
    return 2;
}
