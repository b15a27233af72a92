/*
 * The M maker: a helper thread that creates the Ms the scheduler asks for
 * (Go has one, its template thread, for another reason).
 *
 * glibc's pthread_create calls the program's calloc (the new thread's DTV),
 * and a program's malloc may take a pthread mutex: jemalloc's do (redis,
 * mariadb). Where the scheduler needs an M, the caller holds what that
 * lock's holder may need to let it go: an M's scheduler context has the G
 * it is about to run in hand (the holder itself, when it yielded or was
 * preempted with the lock held), a G on its way into a blocking call is
 * handing its P off (its run queue, where the holder may wait, is nobody's
 * meanwhile), sysmon is the one that preempts and retakes. Waiting there
 * for the lock, the process hung. The maker holds nothing: while it waits
 * for the lock, every M goes on, and the holder runs.
 *
 * startm without an idle M (mmaker_ask): the P goes idle, its Gs to the
 * global queue (where the running Ms find them), and the maker makes an M,
 * which takes an idle P in stopm if work is queued by then. From its
 * start the maker keeps one M idle in reserve, and makes another when
 * startm takes the last: a G handing off its P on its way into a blocking
 * call finds an M at once, even when every other M is blocked in the
 * kernel and the lock's holder waits in a run queue (at one P nothing else
 * could run it until an M was made: the first hand-off of a process hung
 * so without the reserve). The reserve costs a process that makes threads
 * one idle OS thread; it is made silently: a refusal (RLIMIT_NPROC) is said
 * when an M is needed, not when one is merely kept.
 *
 * A G entering a call that blocks as a rule (entersyscallblock) takes an idle
 * M for its P's queued work itself, and with none waits for the maker first,
 * parked as a G, while its P runs the queue (mmaker_m_for_block): Gs that
 * block in a row use the reserve up faster than the maker replaces it, and
 * the last M would go into the kernel with the holder queued behind it.
 *
 * Without a maker (it could not be started; a fork child whose helpers are
 * not started yet: it has one thread, no other holder) startm makes the M
 * itself, as before. What is left: calls that block only sometimes
 * (entersyscall: sysmon hands their P off once they last) do not wait, so
 * with every M blocked in such calls and the holder queued, the maker waits
 * for the lock until one returns (natively the holder runs on its own thread).
 */
#include <stdbool.h>
#include <stdint.h>

#include "gfutex.h"
#include "sched.h"
#include "throw.h"

static struct {
    uint32_t bell;    /* futex word: bumped by each request */
    uint32_t up;      /* the maker runs (atomic) */
    uint32_t want;    /* Ms asked for and not counted coming yet (sched.lock) */
    uint32_t forg;    /* of which a G's work asked for (sched.lock; warn_no_m) */
    uint32_t reserve; /* keep an idle M (atomic): once the maker runs */
    uint32_t made;    /* gfutex word: bumped after each of the maker's rounds */
    uint32_t refused; /* its last newm failed (atomic): Gs do not wait for it */
    uint32_t waiting; /* Gs in mmaker_wait (atomic): not a deadlock while any */
} mk;

/* After each round (an M made, refused, or found not needed): the Gs waiting in
 * mmaker_wait look again. */
static void round_done(void)
{
    __atomic_add_fetch(&mk.made, 1, __ATOMIC_RELEASE);
    gfutex_wake(&mk.made, INT32_MAX);
}

bool mmaker_ask(struct p *pp, bool spinning)
{
    if (!__atomic_load_n(&mk.up, __ATOMIC_ACQUIRE))
        return false;
    runq_to_global(pp);
    runtime_lock(&sched.lock);
    pidleput(pp);
    /* Each M asked for or on its way takes an idle P in stopm if work waits by then: no
     * more than there are idle Ps. Counting only the requests not begun yet, a burst of
     * pthread_create while new Ms were slow to reach stopm (RLIMIT_AS, mmap_lock
     * contention) asked again at every wakep: 16 Ms for 2 Ps, 1 MiB of stack each.
     * Each M counts once: a request moves from want to nmcoming under one lock (newm
     * calls mmaker_counted), and an M that reaches stopm before newm counts it takes
     * itself off first (nmcoming -1 until then). Read as 0 there, or counted in both
     * for a moment, an M already busy or idle passed for one on its way: the ask was
     * dropped, its P stayed idle with the threads queued, and the process hung (Open
     * POSIX's pthread_cond_broadcast/1-2 at one P). */
    if ((int32_t)mk.want + sched.nmcoming < sched.npidle) {
        mk.want++;
        mk.forg += sched_self() != NULL;
    }
    runtime_unlock(&sched.lock);
    if (spinning) /* the M comes later, not spinning: it finds pp idle and the work queued */
        __atomic_fetch_sub(&sched.nmspinning, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&mk.bell, 1, __ATOMIC_RELEASE);
    futexwakeup(&mk.bell, 1);
    return true;
}

/* One request: an M for an idle P, if one is still idle: an idle M if one came back
 * meanwhile (the reserve, just made), else a new one. A new M takes no P here: it
 * starts idle, and stopm gives it an idle P if work is queued by then. Were pp
 * reserved for it while the maker waits in pthread_create for the program's lock,
 * the Gs that pp's owner moved to the global queue (the holder among them) might
 * have no P to run on. */
static void make_asked(void)
{
    runtime_lock(&sched.lock);
    bool forg = mk.forg > 0;
    mk.forg -= forg;
    struct p *pp;
    struct m *nmp;
    for (;;) {
        pp = pidleget();
        nmp = pp ? mget() : NULL;
        if (pp && !nmp)
            pidleput(pp);
        /* An M that gave its P back is idle in a moment, or takes the P itself: wait
         * for it rather than make another (sched.nmgoing). */
        if (!pp || nmp || sched.nmgoing == 0)
            break;
        runtime_unlock(&sched.lock);
        osyield();
        runtime_lock(&sched.lock);
    }
    if (!pp || nmp)
        mk.want--;
    runtime_unlock(&sched.lock);
    if (nmp) {
        mwake(nmp, pp, false);
    } else if (pp) {
        /* Still wanted until newm counts it coming (mmaker_counted). */
        bool made = newm(NULL, false, forg ? NEWM_G : NEWM_SCHED);
        if (!made) {
            runtime_lock(&sched.lock);
            mk.want--;
            runtime_unlock(&sched.lock);
        }
        __atomic_store_n(&mk.refused, !made, __ATOMIC_RELAXED);
    }
}

void mmaker_counted(void)
{
    if (mk.want > 0) /* never 0 here (make_asked counted the request): a guard */
        mk.want--;
}

static void keep_reserve(void)
{
    if (!__atomic_load_n(&mk.reserve, __ATOMIC_RELAXED))
        return;
    runtime_lock(&sched.lock);
    /* An M on its way to stopm (just made, or its P given back) will be idle, or take a
     * P whose work the reserve would otherwise have had to take (stopm pokes then): no
     * second one. */
    bool none = sched.nmidle == 0 && sched.nmcoming == 0 && sched.nmgoing == 0 &&
                sched.mcount < sched.maxmcount;
    runtime_unlock(&sched.lock);
    if (none)
        __atomic_store_n(&mk.refused, !newm(NULL, false, NEWM_RESERVE), __ATOMIC_RELAXED);
}

static void *maker(void *arg)
{
    (void)arg;
    for (;;) {
        uint32_t bell = __atomic_load_n(&mk.bell, __ATOMIC_ACQUIRE);
        for (;;) {
            runtime_lock(&sched.lock);
            bool asked = mk.want > 0;
            runtime_unlock(&sched.lock);
            if (!asked)
                break;
            make_asked();
        }
        keep_reserve();
        round_done();
        futexsleep(&mk.bell, bell, -1);
    }
    return NULL;
}

/* Under sched.lock: an M that came to stopm (sched.nmcoming) and is busy after all, with
 * none idle or coming: keep_reserve left the reserve to it; true: poke the maker. */
bool mmaker_reserve_left(bool came)
{
    return came && sched.nmidle == 0 && sched.nmcoming <= 0 && sched.nmgoing == 0;
}

/* The bell of an M that went idle or was taken: the reserve may need a new one. */
void mmaker_poke(void)
{
    if (__atomic_load_n(&mk.reserve, __ATOMIC_RELAXED)) {
        __atomic_add_fetch(&mk.bell, 1, __ATOMIC_RELEASE);
        futexwakeup(&mk.bell, 1);
    }
}

/*
 * For a G about to block in the kernel (entersyscallblock, its M inside the
 * runtime): the P is handed off, to an idle M if Gs are queued. With none idle,
 * the maker makes one, and may wait for the program's malloc lock meanwhile;
 * its holder may be one of those queued Gs, and once every M is blocked in the
 * kernel, nothing runs it. So the G takes an idle M for its P here (*nmp), and
 * with none, waits for the maker first (true: mmaker_wait), parked as a G: its
 * P runs the queued Gs (the holder among them) meanwhile. It goes on with none
 * when its P needs none, when one is on its way to stopm (a new M takes an idle
 * P with work queued), or when none can be made (no maker, the cap, a refusal).
 */
bool mmaker_m_for_block(struct p *pp, struct m **nmp, uint32_t *seen)
{
    *nmp = NULL;
    *seen = __atomic_load_n(&mk.made, __ATOMIC_ACQUIRE);
    /* Nothing queued (read racily): handoffp puts the P idle, as before, and work that
     * comes meanwhile finds its way there; sched.lock is not taken for nothing. */
    if (!__atomic_load_n(&mk.up, __ATOMIC_ACQUIRE) ||
        (runqempty(pp) && __atomic_load_n(&sched.runqsize, __ATOMIC_RELAXED) == 0))
        return false;
    runtime_lock(&sched.lock);
    bool work = !runqempty(pp) || sched.runqsize > 0;
    if (work)
        *nmp = mget();
    bool last = *nmp && sched.nmidle == 0;
    bool wait = work && !*nmp && sched.nmcoming <= 0 && sched.mcount < sched.maxmcount &&
                !__atomic_load_n(&mk.refused, __ATOMIC_RELAXED);
    runtime_unlock(&sched.lock);
    if (last || wait)
        mmaker_poke();
    return wait;
}

void mmaker_wait(uint32_t seen)
{
    __atomic_add_fetch(&mk.waiting, 1, __ATOMIC_RELAXED);
    gfutex_wait(&mk.made, seen, -1);
    __atomic_sub_fetch(&mk.waiting, 1, __ATOMIC_RELAXED);
}

bool mmaker_awaited(void)
{
    return __atomic_load_n(&mk.waiting, __ATOMIC_RELAXED) > 0;
}

int mmaker_init(void)
{
    int err = sched_helper_thread(maker);
    if (err == 0) {
        __atomic_store_n(&mk.up, 1, __ATOMIC_RELEASE);
        /* The first reserve here, made by the caller (the main thread starting the
         * runtime, or a fork child's), which alone may hold the program's lock now:
         * made by the maker, it could wait for a holder that a first hand-off strands.
         * The maker is up first: a switch inside the program's calloc (chaos) that
         * wants an M asks it. */
        newm(NULL, false, NEWM_RESERVE);
        __atomic_store_n(&mk.reserve, 1, __ATOMIC_RELAXED);
    } else
        rt_print(2,
                 "goshim: cannot start the thread that makes OS threads (error %d): the "
                 "scheduler makes them itself\n",
                 err);
    return err;
}

/* Fork child: the maker is gone; a new one now, or when the child needs it. */
void mmaker_fork_child(void)
{
    FORK_SET(mk.up, 0);
    FORK_SET(mk.want, 0);
    FORK_SET(mk.forg, 0);
    FORK_SET(mk.reserve, 0);
    FORK_SET(mk.waiting, 0); /* the parent's other threads' */
    if (!sched_helper_defer(mmaker_init))
        mmaker_init();
}
