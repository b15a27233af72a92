/*
 * Chaos mode (GOSHIM_CHAOS=SEED): schedules a legacy program would rarely
 * see, chosen by a seeded generator so that a failure can be replayed.
 *
 *   - run-queue order: a readied, new or yielding G goes to runnext (runs
 *     next) or to the tail of the queue, at random (runq.c);
 *   - steal victims: each M's generator is seeded from the seed and its id;
 *   - yields at wrapper boundaries (chaos_point, at the top of the mutex,
 *     condition variable, rwlock, semaphore, create and join wrappers and
 *     of the netpoller's reads and writes): one in three gives the P away;
 *   - extra preemptions: with more than one P, sysmon asks a running G to
 *     yield at its next safe point on one round in eight.
 *
 * Every draw comes from one generator (splitmix64 over an atomic counter),
 * so with GOSHIM_PROCS=1 a program whose own behaviour is deterministic
 * (no timing, no I/O readiness races) gets the same schedule for the same
 * seed: sysmon's timed preemptions are the only draw-free switches, and
 * they happen only to a G that computes for a whole slice.
 */
#include "sched.h"
#include "throw.h"

bool sched_chaos;
static uint64_t chaos_counter;

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void chaos_init(uint64_t seed)
{
    chaos_counter = seed;
    sched_chaos = true;
    rt_print(2, "goshim: chaos mode, seed %lu (GOSHIM_CHAOS=%lu replays this schedule)\n",
             (unsigned long)seed, (unsigned long)seed);
}

uint64_t chaos_rand(void)
{
    return mix(__atomic_add_fetch(&chaos_counter, 0x9E3779B97F4A7C15ULL, __ATOMIC_RELAXED));
}

uint64_t chaos_seed_for(int64_t id)
{
    return mix(chaos_counter ^ ((uint64_t)id * 0xD6E8FEB86659FD93ULL)) | 1;
}

/* Set once the shim runs every wrapper through goshim (sched_chaos_arm). */
static bool chaos_armed;

void sched_chaos_arm(void)
{
    __atomic_store_n(&chaos_armed, true, __ATOMIC_RELEASE);
}

void chaos_yield(void)
{
    /* Not while the runtime starts: the shim's wrappers still pass to glibc then, and a
     * G switched out inside one (holding a program's mutex, in glibc's pthread_create)
     * would leave glibc's waiters for a lock that goshim's unlock never wakes. */
    if (!__atomic_load_n(&chaos_armed, __ATOMIC_ACQUIRE) || !sched_self() || m_in_runtime() ||
        getm()->p == NULL || __atomic_load_n(&getm()->pless, __ATOMIC_RELAXED))
        return;
    if (chaos_rand() % 3 == 0)
        sched_goyield();
}
