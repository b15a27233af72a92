/*
 * What native pthreads cannot tell: "all threads are asleep - deadlock!"
 * and a dump of every thread with what it waits for and where.
 *
 * Deadlock (checked by sysmon each round, deadlock_check): every P idle,
 * nothing queued, no timer armed, no G in an I/O wait (epoll may report
 * for it, even on the program's own pipe), every G that exists parked
 * (none runnable, running or in a system call), and no G scheduled
 * anywhere for 20 ms, and no handler of the program's installed for a
 * signal that can come from outside (sched_hooks.signal_may_wake: such a
 * program may be waiting for one, as Go does not report a program that
 * listens for signals). Then nothing can wake anyone but a signal the
 * program does not catch; the report is printed once per deadlock and the
 * program keeps waiting, or GOSHIM_DEADLOCK=abort ends it like Go, with
 * exit status 2.
 *
 * Each thread: its number (the G id), its name (pthread_setname_np), what
 * it waits for - the wrappers say (sched_set_wait) and the shim names the
 * object and, for a mutex, its owner (sched_hooks.describe) - and a
 * backtrace from its saved context. Backtraces use libunwind, loaded with
 * dlopen(RTLD_LOCAL) the first time one is needed, so that its _Unwind_*
 * symbols never stand in for libgcc's in the program (C++ exceptions); a
 * parked G's frame is a call into ctx_mcall (context_x86_64_sysv_elf.S),
 * whose saved callee-saved registers and return address seed the walk.
 * Running Gs are listed without one (their registers are on another CPU).
 *
 * kill -QUIT on a program that installed no SIGQUIT handler dumps the same
 * way (from sysmon, outside the handler) and exits with status 2, as Go.
 */
#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <libunwind.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "libc.h"
#include "netpoll.h"
#include "sched.h"
#include "throw.h"
#include "timer.h"
#include "tls.h"

static const char *const reasons[] = {
    [WAIT_NONE] = "waiting",    [WAIT_MUTEX] = "mutex",   [WAIT_COND] = "condition variable",
    [WAIT_RWLOCK] = "rwlock",   [WAIT_SEM] = "semaphore", [WAIT_JOIN] = "join",
    [WAIT_BARRIER] = "barrier", [WAIT_ONCE] = "once",     [WAIT_SLEEP] = "sleep",
    [WAIT_IO] = "I/O",          [WAIT_FUTEX] = "futex",   [WAIT_SIGNAL] = "signal",
};

void sched_set_wait(int kind, void *obj)
{
    struct g *gp = sched_self();
    if (gp) {
        gp->waitkind = kind;
        gp->waitobj = obj;
    }
}

/* ---- backtraces ----------------------------------------------------------------------- */

static struct {
    int (*init_local)(unw_cursor_t *, unw_context_t *);
    int (*step)(unw_cursor_t *);
    int (*get_reg)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
    int (*get_proc_name)(unw_cursor_t *, char *, size_t, unw_word_t *);
    int tried;
} unw;

static bool unw_load(void)
{
    if (!unw.tried) {
        unw.tried = 1;
        void *h = libc_dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
        if (h) {
            unw.init_local =
                (int (*)(unw_cursor_t *, unw_context_t *))dlsym(h, "_ULx86_64_init_local");
            unw.step = (int (*)(unw_cursor_t *))dlsym(h, "_ULx86_64_step");
            unw.get_reg =
                (int (*)(unw_cursor_t *, unw_regnum_t, unw_word_t *))dlsym(h, "_ULx86_64_get_reg");
            unw.get_proc_name = (int (*)(unw_cursor_t *, char *, size_t, unw_word_t *))dlsym(
                h, "_ULx86_64_get_proc_name");
        }
    }
    return unw.init_local && unw.step && unw.get_reg && unw.get_proc_name;
}

/* One frame: "  #n 0xPC name+off (object)". */
static void print_frame(int fd, int n, uintptr_t pc, const char *name, uintptr_t off)
{
    Dl_info di;
    const char *obj = dladdr((void *)pc, &di) && di.dli_fname ? di.dli_fname : "?";
    const char *base = strrchr(obj, '/');
    if (name && *name)
        rt_print(fd, "  #%d 0x%lx %s+0x%lx (%s)\n", n, (unsigned long)pc, name, (unsigned long)off,
                 base ? base + 1 : obj);
    else
        rt_print(fd, "  #%d 0x%lx (%s)\n", n, (unsigned long)pc, base ? base + 1 : obj);
}

/* The backtrace of a switched-out G, from its saved frame (see the .S for the layout). */
static void backtrace_parked(int fd, struct g *gp)
{
    if (!unw_load()) {
        rt_print(fd, "  (no backtrace: libunwind.so.8 could not be loaded)\n");
        return;
    }
    const uintptr_t *f = (const uintptr_t *)gp->sched.sp;
    unw_context_t uc;
    memset(&uc, 0, sizeof uc);
    uc.uc_mcontext.gregs[REG_R15] = (greg_t)f[1];
    uc.uc_mcontext.gregs[REG_R14] = (greg_t)f[2];
    uc.uc_mcontext.gregs[REG_R13] = (greg_t)f[3];
    uc.uc_mcontext.gregs[REG_R12] = (greg_t)f[4];
    uc.uc_mcontext.gregs[REG_RBX] = (greg_t)f[5];
    uc.uc_mcontext.gregs[REG_RBP] = (greg_t)f[6];
    uc.uc_mcontext.gregs[REG_RIP] = (greg_t)f[7];
    uc.uc_mcontext.gregs[REG_RSP] = (greg_t)(gp->sched.sp + 64);
    unw_cursor_t c;
    if (unw.init_local(&c, &uc) < 0) {
        rt_print(fd, "  (no backtrace)\n");
        return;
    }
    for (int n = 0; n < 48; n++) {
        unw_word_t pc = 0, off = 0;
        char name[128];
        if (unw.get_reg(&c, UNW_REG_IP, &pc) < 0 || pc == 0)
            break;
        if (unw.get_proc_name(&c, name, sizeof name, &off) < 0)
            name[0] = 0;
        print_frame(fd, n, (uintptr_t)pc, name, (uintptr_t)off);
        if (unw.step(&c) <= 0)
            break;
    }
}

/* ---- the dump ------------------------------------------------------------------------- */

static const char *status_word(uint32_t st)
{
    switch (st) {
    case Grunnable:
        return "runnable";
    case Grunning:
        return "running";
    case Gsyscall:
        return "in a system call";
    case Gwaiting:
        return "waiting";
    default:
        return "?";
    }
}

/* ", held by thread N "name"" for a mutex waited on (the shim finds the holder). */
static void mutex_owner(struct g *waiter, char *buf, size_t len)
{
    int gone = 0;
    struct g *o = sched_hooks.blocker ? sched_hooks.blocker(waiter, &gone) : NULL;
    char name[64] = "", obj[8];
    if (o && sched_hooks.describe)
        sched_hooks.describe(o, name, sizeof name, obj, sizeof obj);
    size_t n = strlen(buf);
    if (o)
        snprintf(buf + n, len - n, ", held by thread %lu%s", (unsigned long)o->goid, name);
    else if (gone)
        snprintf(buf + n, len - n, ", held by id %d", gone);
}

/* "name [what it waits for]" of a parked G into buf (allglock held). */
static void describe_wait(struct g *gp, char *buf, size_t len)
{
    char name[64] = "", obj[192] = "";
    if (sched_hooks.describe)
        sched_hooks.describe(gp, name, sizeof name, obj, sizeof obj);
    int k = gp->waitkind >= 0 && gp->waitkind < WAIT_KINDS ? gp->waitkind : WAIT_NONE;
    if (!obj[0] && gp->waitobj)
        snprintf(obj, sizeof obj, "%p", gp->waitobj);
    if (k == WAIT_MUTEX && gp->waitobj)
        mutex_owner(gp, obj, sizeof obj);
    snprintf(buf, len, "%s [%s%s%s]", name, reasons[k], obj[0] ? " " : "", obj);
}

void sched_describe(struct g *gp, char *buf, size_t len)
{
    if (g_status(gp) == Gwaiting) {
        describe_wait(gp, buf, len);
        return;
    }
    buf[0] = 0;
    if (sched_hooks.describe) {
        char obj[8];
        sched_hooks.describe(gp, buf, len, obj, sizeof obj);
    }
}

/*
 * At exit (GOSHIM_STATS): which parked threads wait for good. Most threads
 * still parked when a program exits are not leaks: a daemon thread waiting
 * for work on a condition variable, a queue or a socket is normal (a JVM has
 * several), and could have been woken had the program gone on. Such a
 * thread is listed as "still waiting at exit". A wait is a leak only when
 * nothing could ever end it: a mutex whose holder has exited, or that a
 * cycle of waits holds (a deadlock: each holder waits, through mutexes and
 * joins, for the next), or a join of a thread that waits for good. Each G
 * waits for at most one other (the holder, the joined thread), so the walk
 * follows one chain (a slow and a fast pointer find a cycle in at most twice
 * allglen steps). Sleepers are not listed.
 */
enum { WAITS_MAYBE, WAITS_CYCLE, WAITS_BEHIND, WAITS_GONE };

/* The G whose progress gp's wait needs (a mutex holder, a joined thread), or NULL; *gone
 * when it is a mutex whose holder no longer exists. allglock held. */
static struct g *blocker(struct g *gp, bool *gone)
{
    int id = 0;
    struct g *o = gp->waitobj && sched_hooks.blocker ? sched_hooks.blocker(gp, &id) : NULL;
    *gone = gp->waitkind == WAIT_MUTEX && o == NULL && id != 0;
    return o;
}

/* WAITS_CYCLE if gp is on the cycle that on (a G on a cycle of waits) is on, else
 * WAITS_BEHIND: gp waits for a thread of that cycle. allglock held. */
static int on_cycle(struct g *gp, struct g *on)
{
    bool gone;
    struct g *x = on;
    for (uint64_t n = 0; n <= sched.allglen; n++) {
        if (x == gp)
            return WAITS_CYCLE;
        x = blocker(x, &gone);
        if (x == on || x == NULL)
            break;
    }
    return WAITS_BEHIND;
}

/* WAITS_CYCLE, _BEHIND or _GONE when gp's wait can never end, else WAITS_MAYBE. allglock held. */
static int waits_forever(struct g *gp)
{
    struct g *slow = gp, *fast = gp;
    for (uint64_t n = 0; n <= 2 * sched.allglen + 2; n++) {
        bool gone;
        if (g_status(fast) != Gwaiting)
            return WAITS_MAYBE;
        struct g *next = blocker(fast, &gone);
        if (gone)
            return WAITS_GONE;
        if (next == NULL)
            return WAITS_MAYBE;
        fast = next;
        if (n & 1)
            slow = blocker(slow, &gone);
        if (fast == slow)
            return on_cycle(gp, fast);
    }
    return WAITS_MAYBE;
}

void leaks_print(int fd)
{
    static const char *const why[] = {
        [WAITS_CYCLE] = "a deadlock: a cycle of mutex waits and joins",
        [WAITS_BEHIND] = "it waits for a thread in a deadlock",
        [WAITS_GONE] = "the mutex's holder has exited",
    };
    runtime_lock(&sched.allglock);
    for (struct g *gp = sched.allg; gp; gp = gp->alllink) {
        /* A G not parked with a wait noted is in its wait call: on its way in (a wrapper
         * notes it first: cond_wait before it lets the mutex go) or woken and not yet run. */
        uint32_t st = g_status(gp);
        int kind = __atomic_load_n(&gp->waitkind, __ATOMIC_RELAXED);
        if ((st != Gwaiting && (kind == WAIT_NONE || st == Gdead || st == Gidle)) ||
            !(gp->flags & G_STARTED) || kind == WAIT_SLEEP)
            continue;
        char what[320];
        describe_wait(gp, what, sizeof what);
        int w = waits_forever(gp);
        if (w == WAITS_MAYBE)
            rt_print(fd, "goshim stats: thread %lu%s still waiting at exit\n",
                     (unsigned long)gp->goid, what);
        else
            rt_print(fd, "goshim stats: leak: thread %lu%s can never wake (%s)\n",
                     (unsigned long)gp->goid, what, why[w]);
    }
    runtime_unlock(&sched.allglock);
}

/* Every G that exists: a header line, then its backtrace if it is switched out. */
static void dump_threads(int fd)
{
    runtime_lock(&sched.allglock);
    for (struct g *gp = sched.allg; gp; gp = gp->alllink) {
        uint32_t st = g_status(gp);
        if (st == Gdead || !(gp->flags & G_STARTED))
            continue;
        char what[320];
        sched_describe(gp, what, sizeof what);
        if (st == Gwaiting)
            rt_print(fd, "\nthread %lu%s:\n", (unsigned long)gp->goid, what);
        else
            rt_print(fd, "\nthread %lu%s [%s]:\n", (unsigned long)gp->goid, what, status_word(st));
        if (st == Gwaiting || st == Grunnable)
            backtrace_parked(fd, gp);
        else
            rt_print(fd, "  (running on OS thread %d: no backtrace)\n", sched_gtid(gp));
    }
    runtime_unlock(&sched.allglock);
}

/* ---- deadlock ------------------------------------------------------------------------- */

enum { DEADLOCK_SETTLE_NS = 20000000 }; /* asleep that long, with nothing scheduled */

static struct {
    uint64_t ticks;    /* schedtick sum when it was first seen asleep (0: not) */
    int64_t since;     /* ... and when */
    uint64_t reported; /* schedtick sum of the deadlock last reported */
    uint64_t walked;   /* schedtick sum when the Gs were last walked */
} dl;

static uint64_t tick_sum(void)
{
    uint64_t s = 1; /* never 0 */
    for (int32_t i = 0; i < sched.gomaxprocs; i++)
        s += __atomic_load_n(&sched.allp[i]->schedtick, __ATOMIC_RELAXED);
    return s;
}

/* Whether nothing in the runtime can run or wake a G: every P idle, no queued G,
 * no timer, no G in an I/O wait. O(P). */
static bool runtime_idle(void)
{
    return __atomic_load_n(&sched.npidle, __ATOMIC_ACQUIRE) == sched.gomaxprocs &&
           __atomic_load_n(&sched.runqsize, __ATOMIC_RELAXED) == 0 && timers_next() < 0 &&
           !netpoll_anywaiters();
}

/* Whether every G is parked with nothing in the runtime to wake it: a walk of
 * every G, O(G) under allglock. */
static bool all_asleep(void)
{
    int waiting = 0;
    runtime_lock(&sched.allglock);
    for (struct g *gp = sched.allg; gp; gp = gp->alllink) {
        uint32_t st = g_status(gp);
        /* A G in an I/O wait may be woken through epoll even on the
         * program's own pipe (a close, a write goshim did not see): sysmon
         * polls for it; never a deadlock. */
        if (st == Grunnable || st == Grunning || st == Gsyscall ||
            (st == Gwaiting && gp->waitkind == WAIT_IO)) {
            waiting = -1;
            break;
        }
        waiting += st == Gwaiting && (gp->flags & G_STARTED);
    }
    runtime_unlock(&sched.allglock);
    return waiting > 0;
}

/*
 * Cost: the O(P) tests run every sysmon round; the walk of every G (a few
 * ms at a million threads, holding allglock, which pthread_create takes)
 * runs only once the runtime has been idle with nothing scheduled for the
 * settle time, and at most once per such quiet spell (schedtick sum). So a
 * busy program, however many threads it has, never pays for it.
 */
void deadlock_check(void)
{
    if (sched_hooks.deadlock == DEADLOCK_OFF)
        return;
    if (!runtime_idle()) {
        FORK_SET(dl.ticks, 0); /* unwritten while nothing changes: a fork copies what is */
        return;
    }
    uint64_t t = tick_sum();
    int64_t now = nanotime();
    if (dl.ticks != t) { /* first sight, or something ran since: look again later */
        dl.ticks = t;
        dl.since = now;
        return;
    }
    if (dl.reported == t || dl.walked == t || now - dl.since < DEADLOCK_SETTLE_NS)
        return;
    dl.walked = t;
    if ((sched_hooks.signal_may_wake && sched_hooks.signal_may_wake()) || mmaker_awaited() ||
        !all_asleep() || tick_sum() != t)
        return;
    dl.reported = t;
    rt_print(2, "goshim: all threads are asleep - deadlock!\n");
    dump_threads(2);
    if (sched_hooks.deadlock == DEADLOCK_ABORT) {
        rt_print(2, "\ngoshim: GOSHIM_DEADLOCK=abort: exiting with status 2\n");
        _exit(2);
    }
    rt_print(2, "\ngoshim: the program keeps waiting, as it would natively "
                "(GOSHIM_DEADLOCK=abort ends it)\n");
}

/* ---- SIGQUIT --------------------------------------------------------------------------- */

static volatile sig_atomic_t quit_requested;

static void on_quit(int sig)
{
    (void)sig;
    quit_requested = 1;
    sysmon_wake(); /* it acts on it at its next round, which may be a second away */
    /* A fork child whose sysmon is not started yet: it runs one thread, outside the runtime
     * (not inside: that thread starts sysmon on its way back from the scheduler). */
    if (sysmon_deferred()) {
        if (!m_in_runtime())
            quit_check();
        sched_helpers_want();
    }
    sysmon_wake();
}

bool sched_quit_handler_is(void (*h)(int))
{
    return h == on_quit;
}

void quit_install(void)
{
    struct sigaction sa, old;
    if (libc_sigaction(SIGQUIT, NULL, &old) != 0 || old.sa_handler != SIG_DFL)
        return; /* the program (or its parent: SIG_IGN) decided */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_quit;
    sa.sa_flags = SA_RESTART;
    libc_sigaction(SIGQUIT, &sa, NULL);
}

void quit_check(void)
{
    if (!quit_requested)
        return;
    rt_print(2, "SIGQUIT: quit\n");
    dump_threads(2);
    _exit(2);
}
