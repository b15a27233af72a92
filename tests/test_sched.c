/*
 * The scheduler running for real: Ms, stealing, wakeups, per-G TLS,
 * overflow reports, configuration. Criterion runs each test in its own
 * process, so each starts the runtime afresh.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "sched/sched.h"
#include "sched/tls.h"
#include "tests/helpers.h"
#include "tests/wg.h"

static void start_with(int nprocs, int64_t preempt_ns)
{
    struct sched_config c;
    sched_config_from_env(&c);
    c.nprocs = nprocs;
    if (preempt_ns >= 0)
        c.preempt_ns = preempt_ns;
    cr_assert_eq(sched_init(&c), 0);
}

static void start(int nprocs)
{
    start_with(nprocs, -1);
}

/* ---- every G runs exactly once ----------------------------------------- */

static unsigned char *ran;
static long nspawn;
static struct sched_wg wg;

static void tiny(void *arg)
{
    __atomic_fetch_add(&ran[(long)arg], 1, __ATOMIC_RELAXED);
    sched_wg_done(&wg);
}

/* Spawns from a G, so children go through runnext, the local ring, its
 * overflow to the global queue, and other Ps' steals. */
static void spawner(void *arg)
{
    (void)arg;
    for (long i = 0; i < nspawn; i++) {
        int err;
        cr_assert_not_null(sched_spawn(tiny, (void *)i, NULL, &err), "spawn %ld failed: %d", i,
                           err);
    }
    sched_wg_done(&wg);
}

static void million(int nprocs)
{
    start(nprocs);
    nspawn = test_scale(1000000);
    ran = calloc((size_t)nspawn, 1);
    sched_wg_init(&wg);
    sched_wg_add(&wg, nspawn + 1);
    int err;
    cr_assert_not_null(sched_spawn(spawner, NULL, NULL, &err));
    sched_wg_wait(&wg);
    for (long i = 0; i < nspawn; i++)
        cr_assert_eq(ran[i], 1, "G %ld ran %d times", i, ran[i]);
    uint64_t overflows = 0;
    for (int i = 0; i < nprocs; i++)
        overflows += sched.allp[i]->noverflow;
    cr_assert_gt(overflows, 0, "the spawner's ring overflowed to the global queue");
}

Test(sched, million_gs_run_exactly_once_p1, .timeout = 120)
{
    million(1);
}

Test(sched, million_gs_run_exactly_once_p2, .timeout = 120)
{
    million(2);
}

Test(sched, million_gs_run_exactly_once_p4, .timeout = 120)
{
    million(4);
}

/* ---- per-G errno and __thread across migrations ------------------------ */

static __thread long tls_counter = 1000;
static long migrations_wanted;
static long migrations;
static long tls_failures;

static void migrator(void *arg)
{
    long id = (long)arg;
    cr_assert_eq(tls_counter, 1000, "a new G sees the initial value");
    cr_assert_eq(errno, 0, "a new G starts with errno 0");
    tls_counter = id * 1000000;
    struct m *last = getm();
    while (__atomic_load_n(&migrations, __ATOMIC_RELAXED) < migrations_wanted) {
        errno = (int)id;
        long before = ++tls_counter;
        long *addr = &tls_counter;
        sched_gosched();
        if (errno != (int)id || tls_counter != before || addr != &tls_counter)
            __atomic_fetch_add(&tls_failures, 1, __ATOMIC_RELAXED);
        struct m *now = getm();
        if (now != last) {
            __atomic_fetch_add(&migrations, 1, __ATOMIC_RELAXED);
            last = now;
        }
    }
    sched_wg_done(&wg);
}

Test(sched, errno_and_thread_locals_stay_per_g_across_migrations, .timeout = 300)
{
    skip_without_full_tls();
    start(2);
    cr_assert(tls_full(), "per-G TLS is available on this machine");
    migrations_wanted = test_scale(100000);
    sched_wg_init(&wg);
    sched_wg_add(&wg, 6);
    for (long i = 1; i <= 6; i++) {
        int err;
        cr_assert_not_null(sched_spawn(migrator, (void *)i, NULL, &err));
    }
    errno = 4242;
    tls_counter = 77;
    sched_wg_wait(&wg);
    cr_assert_eq(tls_failures, 0, "%ld resumes saw a wrong errno or __thread value", tls_failures);
    cr_assert_geq(migrations, migrations_wanted);
    cr_assert_eq(errno, 4242, "the spawning thread's errno is untouched");
    cr_assert_eq(tls_counter, 77, "the spawning thread's __thread is untouched");
}

/*
 * errno mode saves and restores errno's value at each switch, but cannot
 * help code that keeps errno's address across a switch (glibc declares
 * __errno_location const, so compilers do): after a migration that address
 * is another M's errno. That is why full mode exists; here errno is
 * re-read out of line, as the mode requires.
 */
__attribute__((noinline, noipa)) static int read_errno(void)
{
    return errno;
}

__attribute__((noinline, noipa)) static void write_errno(int v)
{
    errno = v;
}

static void errno_worker(void *arg)
{
    long id = (long)arg;
    cr_assert_eq(read_errno(), 0, "a new G starts with errno 0");
    for (long i = 0; i < migrations_wanted; i++) {
        write_errno((int)id);
        sched_gosched();
        if (read_errno() != (int)id)
            __atomic_fetch_add(&tls_failures, 1, __ATOMIC_RELAXED);
    }
    sched_wg_done(&wg);
}

Test(sched, errno_mode_keeps_errno_per_g, .timeout = 120)
{
    setenv("GOSHIM_TLS", "errno", 1);
    cr_redirect_stderr();
    struct sched_config c;
    sched_config_from_env(&c);
    c.nprocs = 2;
    cr_assert_eq(sched_init(&c), 0);
    cr_assert(!tls_full());
    migrations_wanted = test_scale(5000);
    sched_wg_init(&wg);
    sched_wg_add(&wg, 4);
    for (long i = 1; i <= 4; i++) {
        int err;
        sched_spawn(errno_worker, (void *)i, NULL, &err);
    }
    sched_wg_wait(&wg);
    /* In errno mode __thread is per M, so only errno is checked here. */
    cr_assert_eq(tls_failures, 0, "%ld resumes saw another G's errno", tls_failures);
}

/* ---- an idle P is woken for runnable work ------------------------------ */

static int flag;

static void setflag(void *arg)
{
    (void)arg;
    __atomic_store_n(&flag, 1, __ATOMIC_RELEASE);
    sched_wg_done(&wg);
}

/* Spawns a G into its own runnext, then never yields: only another M,
 * woken by wakep, can run it (by stealing runnext). */
static void hog(void *arg)
{
    (void)arg;
    int err;
    sched_spawn(setflag, NULL, NULL, &err);
    long spins = 0;
    while (!__atomic_load_n(&flag, __ATOMIC_ACQUIRE) && spins < 20000000000L)
        spins++;
    sched_wg_done(&wg);
}

Test(sched, runnable_g_beside_idle_p_gets_a_woken_m, .timeout = 60)
{
    /* No preemption: on a busy machine the second M may take longer than a
     * slice to come, and a preempted hog would let the G run on its own P. */
    start_with(2, 0);
    sched_wg_init(&wg);
    sched_wg_add(&wg, 2);
    int err;
    sched_spawn(hog, NULL, NULL, &err);
    sched_wg_wait(&wg);
    cr_assert_eq(flag, 1);
    uint64_t steals = sched.allp[0]->nsteal + sched.allp[1]->nsteal;
    cr_assert_geq(steals, 1, "the G was stolen by the second P");
    cr_assert_eq(sched.mcount, 2);
}

/* ---- a yield wakes an idle P for the G it leaves queued ----------------- */

static int yielder_back; /* the yielder ran again after its yield */
static int hogger_gave_up;

/* Runs beside the yielder on its P, never yielding (no preemption): it
 * ends once the yielder has run again, which only another P can do. */
static void hogger(void *arg)
{
    (void)arg;
    int64_t until = nanotime() + 10 * 1000000000LL;
    while (!__atomic_load_n(&yielder_back, __ATOMIC_ACQUIRE))
        if (nanotime() > until) {
            __atomic_store_n(&hogger_gave_up, 1, __ATOMIC_RELEASE);
            break;
        }
    sched_wg_done(&wg);
}

/* Puts a G into its own P's ring without waking anyone, once the other P
 * is idle and its M asleep; then yields behind it. */
static void yielder(void *arg)
{
    (void)arg;
    struct spawn_attr a = {.guardsize = (size_t)-1, .suspended = true};
    int err;
    struct g *hog = sched_spawn(hogger, NULL, &a, &err);
    cr_assert_not_null(hog, "spawn: %d", err);
    int64_t until = nanotime() + 10 * 1000000000LL;
    for (;;) {
        runtime_lock(&sched.lock);
        bool asleep = sched.npidle == 1 && sched.nmidle >= 1 &&
                      __atomic_load_n(&sched.nmspinning, __ATOMIC_SEQ_CST) == 0;
        runtime_unlock(&sched.lock);
        if (asleep)
            break;
        cr_assert_lt(nanotime(), until, "the other P never went idle");
    }
    struct m *mp = acquirem();
    cr_assert(casgstatus(hog, Gwaiting, Grunnable));
    runqput(mp->p, hog, false); /* no wakep: the yield below must do it */
    releasem(mp);
    sched_goyield(); /* the hogger runs here; this G runs again only on the other P */
    __atomic_store_n(&yielder_back, 1, __ATOMIC_RELEASE);
    sched_wg_done(&wg);
}

Test(sched, yield_beside_an_idle_p_wakes_it, .timeout = 60)
{
    start_with(2, 0); /* no preemption: the hogger keeps its P */
    sched_wg_init(&wg);
    sched_wg_add(&wg, 2);
    int err;
    sched_spawn(yielder, NULL, NULL, &err);
    sched_wg_wait(&wg);
    cr_assert_not(hogger_gave_up, "the yielder never ran again: its yield left the idle P asleep");
}

/* ---- an idle runtime sleeps -------------------------------------------- */

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

Test(sched, idle_ms_park_and_use_no_cpu, .timeout = 60)
{
    start(2);
    nspawn = test_scale(10000);
    ran = calloc((size_t)nspawn, 1);
    sched_wg_init(&wg);
    sched_wg_add(&wg, nspawn);
    for (long i = 0; i < nspawn; i++) {
        int err;
        sched_spawn(tiny, (void *)i, NULL, &err);
    }
    sched_wg_wait(&wg);
    /* Wait (bounded) for every M to park on its note. */
    for (int i = 0; i < 5000; i++) {
        runtime_lock(&sched.lock);
        bool all = sched.nmidle == sched.mcount && sched.npidle == sched.gomaxprocs;
        runtime_unlock(&sched.lock);
        if (all)
            break;
        usleep(1000);
    }
    cr_assert_eq(sched.nmidle, sched.mcount, "every M parked");
    cr_assert_eq(sched.nmspinning, 0);
    double before = cpu_seconds();
    usleep(300000); /* a measurement window, not synchronisation */
    double used = cpu_seconds() - before;
    cr_assert_lt(used, 0.03, "idle process used %.3f s of CPU in 0.3 s", used);
}

/* ---- park/ready ping-pong ---------------------------------------------- */

struct pingpong {
    struct runtime_lock lock;
    struct g *waiting;
    long turn, rounds;
};

static bool park_unlock_pp(struct g *gp, void *arg)
{
    struct pingpong *pp = arg;
    (void)gp;
    runtime_unlock(&pp->lock);
    return true;
}

static struct pingpong ppg;

static void player(void *arg)
{
    long me = (long)arg;
    for (long i = 0; i < ppg.rounds; i++) {
        runtime_lock(&ppg.lock);
        while (ppg.turn % 2 != me) {
            ppg.waiting = sched_self();
            gopark(park_unlock_pp, &ppg, waitReasonTest);
            runtime_lock(&ppg.lock);
        }
        ppg.turn++;
        struct g *other = ppg.waiting;
        ppg.waiting = NULL;
        runtime_unlock(&ppg.lock);
        if (other)
            goready(other);
    }
    sched_wg_done(&wg);
}

Test(sched, park_ready_ping_pong_alternates, .timeout = 120)
{
    start(2);
    ppg.rounds = test_scale(50000);
    sched_wg_init(&wg);
    sched_wg_add(&wg, 2);
    int err;
    sched_spawn(player, (void *)0, NULL, &err);
    sched_spawn(player, (void *)1, NULL, &err);
    sched_wg_wait(&wg);
    cr_assert_eq(ppg.turn, 2 * ppg.rounds, "every round was played once");
    uint64_t parks = sched.allp[0]->npark + sched.allp[1]->npark;
    cr_assert_gt(parks, 0);
}

/* ---- stack overflow is reported by name -------------------------------- */

static volatile long sink;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winfinite-recursion"
static long recurse(long n)
{
    volatile char pad[512];
    pad[0] = (char)n;
    sink += pad[0];
    return recurse(n + 1) + pad[0];
}
#pragma GCC diagnostic pop

static void overflow_g(void *arg)
{
    (void)arg;
    recurse(0);
}

static int overflow_child(void *arg)
{
    (void)arg;
    struct sched_config c;
    sched_config_from_env(&c);
    c.nprocs = 1;
    c.stack_size = 64 * 1024;
    if (sched_init(&c) != 0)
        return 3;
    sched_wg_init(&wg);
    sched_wg_add(&wg, 1);
    int err;
    sched_spawn(overflow_g, NULL, NULL, &err);
    sched_wg_wait(&wg);
    return 0;
}

Test(sched, stack_overflow_is_reported_not_silent, .timeout = 60)
{
    char out[4096];
    int st = run_child(overflow_child, NULL, out, sizeof out);
    cr_assert(WIFSIGNALED(st), "child should die by a signal, status %d, output: %s", st, out);
    cr_assert_eq(WTERMSIG(st), SIGSEGV);
    cr_assert(strstr(out, "goshim: thread 1 overflowed its 65536-byte stack"),
              "no overflow report in: %s", out);
}

/* ---- configuration ----------------------------------------------------- */

Test(config, malformed_goshim_procs_is_rejected_with_a_message, .init = cr_redirect_stderr,
     .timeout = 10)
{
    setenv("GOSHIM_PROCS", "two", 1);
    struct sched_config c;
    int bad = sched_config_from_env(&c);
    cr_assert_eq(bad, 1);
    cr_assert_eq(c.nprocs, 0, "the default (0 = usable CPUs) is kept");
    fflush(stderr);
    cr_assert_stderr_eq_str("goshim: GOSHIM_PROCS=two is not valid: want a whole number from 1 "
                            "to 1024; using the default\n");
}

Test(config, values_are_parsed, .timeout = 10)
{
    setenv("GOSHIM_PROCS", "3", 1);
    setenv("GOSHIM_STACK", "256k", 1);
    setenv("GOSHIM_TLS", "errno", 1);
    setenv("GOSHIM_SCHEDTRACE", "100", 1);
    setenv("GOSHIM_STATS", "1", 1);
    struct sched_config c;
    cr_assert_eq(sched_config_from_env(&c), 0);
    cr_assert_eq(c.nprocs, 3);
    cr_assert_eq(c.stack_size, 256 * 1024);
    cr_assert_eq(c.tls_mode, TLS_MODE_ERRNO);
    cr_assert_eq(c.schedtrace_ms, 100);
    cr_assert(c.stats);
    setenv("GOSHIM_PROCS", "0", 1);
    setenv("GOSHIM_STACK", "12", 1);
    setenv("GOSHIM_TLS", "both", 1);
    setenv("GOSHIM_STATS", "yes", 1);
    cr_redirect_stderr();
    cr_assert_eq(sched_config_from_env(&c), 4);
}

Test(config, default_procs_follow_affinity, .timeout = 10)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    cr_assert_eq(sched_setaffinity(0, sizeof set, &set), 0);
    cr_assert_eq(sched_usable_cpus(), 1);
}

Test(config, cgroup_cpu_max_rounds_up)
{
    cr_assert_eq(sched_cpu_max_cpus("150000 100000\n"), 2);
    cr_assert_eq(sched_cpu_max_cpus("100000 100000\n"), 1);
    cr_assert_eq(sched_cpu_max_cpus("50000 100000\n"), 1);
    cr_assert_eq(sched_cpu_max_cpus("400000 100000"), 4);
    cr_assert_eq(sched_cpu_max_cpus("max 100000\n"), 0);
    cr_assert_eq(sched_cpu_max_cpus(""), 0);
    cr_assert_eq(sched_cpu_max_cpus("100000\n"), 0); /* no period */
}

/* ---- SCHEDTRACE and STATS ---------------------------------------------- */

static int trace_child(void *arg)
{
    (void)arg;
    setenv("GOSHIM_SCHEDTRACE", "20", 1);
    setenv("GOSHIM_STATS", "1", 1);
    struct sched_config c;
    sched_config_from_env(&c);
    c.nprocs = 2;
    if (sched_init(&c) != 0)
        return 3;
    nspawn = 1000;
    ran = calloc((size_t)nspawn, 1);
    sched_wg_init(&wg);
    sched_wg_add(&wg, nspawn);
    for (long i = 0; i < nspawn; i++) {
        int err;
        sched_spawn(tiny, (void *)i, NULL, &err);
    }
    sched_wg_wait(&wg);
    usleep(70000); /* let the monitor print a few periods */
    exit(0);       /* runs the GOSHIM_STATS atexit handler */
}

Test(trace, schedtrace_has_go_format_and_stats_print_at_exit, .timeout = 30)
{
    char out[16384];
    int st = run_child(trace_child, NULL, out, sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    char *line = strstr(out, "SCHED ");
    cr_assert_not_null(line, "no SCHED line in: %s", out);
    long ms;
    int procs, idle, threads, spinning, idlethreads, runq, n = 0;
    int got = sscanf(line,
                     "SCHED %ldms: gomaxprocs=%d idleprocs=%d threads=%d spinningthreads=%d "
                     "idlethreads=%d runqueue=%d [%*d %*d]%n",
                     &ms, &procs, &idle, &threads, &spinning, &idlethreads, &runq, &n);
    cr_assert_eq(got, 7, "bad SCHED line: %.200s", line);
    cr_assert_gt(n, 0, "per-P run queue list missing: %.200s", line);
    cr_assert_eq(procs, 2);
    cr_assert(strstr(out, "goshim stats: procs=2"), "no stats in: %s", out);
    cr_assert(strstr(out, "gs_created=1000 "), "wrong G count in: %s", out);
}

/* ---- the main thread becomes the main G -------------------------------- */

static pthread_t main_self;
static long child_ok;
static int main_moved;

static void check_not_main(void *arg)
{
    (void)arg;
    if (!tls_full() || (!pthread_equal(pthread_self(), main_self) && tls_counter == 1000))
        __atomic_fetch_add(&child_ok, 1, __ATOMIC_RELAXED);
    /* Keep the other P busy until the main G has been seen elsewhere. */
    for (int i = 0; i < 200000 && !__atomic_load_n(&main_moved, __ATOMIC_ACQUIRE); i++)
        sched_gosched();
    sched_wg_done(&wg);
}

Test(sched, adopted_main_thread_keeps_its_tcb_and_migrates, .timeout = 60)
{
    start(2);
    main_self = pthread_self();
    errno = 1234;
    tls_counter = 5;
    cr_assert_eq(sched_adopt_main(), 0);
    struct g *me = sched_self();
    cr_assert_not_null(me, "the main thread is a G now");
    cr_assert_eq(me->goid, 1, "the main G is G1");
    sched_wg_init(&wg);
    sched_wg_add(&wg, 20);
    for (int i = 0; i < 20; i++) {
        int err;
        cr_assert_not_null(sched_spawn(check_not_main, NULL, NULL, &err));
    }
    struct m *first = getm();
    int moved = 0;
    for (int i = 0; i < 200000 && !moved; i++) {
        sched_gosched();
        moved = getm() != first;
        if (tls_full() && (pthread_self() != main_self || errno != 1234 || tls_counter != 5))
            cr_assert_fail("main G lost its identity after a switch");
    }
    __atomic_store_n(&main_moved, 1, __ATOMIC_RELEASE);
    sched_wg_wait(&wg); /* parks the main G */
    cr_assert_eq(child_ok, 20, "every other G had its own TCB");
    cr_assert(moved, "the main G ran on another M at least once");
    if (!tls_full())
        return; /* errno mode: TLS belongs to the M, not the G */
    cr_assert(pthread_equal(pthread_self(), main_self));
    cr_assert_eq(errno, 1234);
    cr_assert_eq(tls_counter, 5);
}

/* The main G's stack bounds are glibc's pthread_getattr_np of the main thread, whatever
 * the stack limit (read at the call by both): the usual one, a small and a large one, one
 * below what the stack's mapping holds, none. */
Test(sched, main_stack_as_glibc_gives_it, .timeout = 10)
{
    static const rlim_t kib[] = {8192, 2048, 65536, 64, 0};
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_STACK, &rl), 0);
    for (size_t i = 0; i < sizeof kib / sizeof kib[0]; i++) {
        rl.rlim_cur = kib[i] ? kib[i] * 1024 : RLIM_INFINITY;
        if (rl.rlim_cur > rl.rlim_max)
            continue;
        cr_assert_eq(setrlimit(RLIMIT_STACK, &rl), 0);
        pthread_attr_t a;
        void *glo = NULL, *lo = NULL;
        size_t gsize = 0, size = 0;
        cr_assert_eq(pthread_getattr_np(pthread_self(), &a), 0);
        pthread_attr_getstack(&a, &glo, &gsize);
        pthread_attr_destroy(&a);
        sched_main_stack(&lo, &size);
        cr_assert(lo == glo && size == gsize, "limit %lu KiB: %p + %zu, glibc's %p + %zu",
                  (unsigned long)kib[i], lo, size, glo, gsize);
    }
}
