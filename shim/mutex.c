/*
 * pthread_mutex_* on gfutex: a blocked G parks, the M runs other Gs.
 *
 * The state lives in the user's pthread_mutex_t, in glibc's own fields
 * (<bits/struct_mutex.h>), with glibc's meanings:
 *   __lock    0 free, 1 held, 2 held with (possible) waiters; the gfutex word
 *   __owner   owner id (below) while held, 0 when free
 *   __count   recursion depth (recursive kind)
 *   __nusers  holders, as glibc counts them (pthread_mutex_destroy: EBUSY if != 0)
 *   __kind    set by the initializer or pthread_mutex_init, never changed here
 * So every static initializer (all-zero = PTHREAD_MUTEX_INITIALIZER, the
 * recursive/errorcheck/adaptive _NP ones) and glibc's pthread_mutex_init,
 * which we do not interpose, stay valid. Kinds with the robust, PP or
 * process-shared bit (and garbage kinds) go to glibc on every call.
 *
 * Priority-inheritance mutexes (PTHREAD_PRIO_INHERIT, not robust, not
 * shared) are handled here too, without the inheritance (goshim has no
 * priorities): glibc's PI protocol stores the owner tid in __lock and lets
 * the kernel (FUTEX_LOCK_PI) look the owner up, which cannot work with a G's
 * TCB tid (not a kernel task) nor with Gs that migrate between Ms. Their
 * error returns stay glibc's: EPERM for an unlock by a non-owner of any
 * type, EDEADLK for trylock of an errorcheck one by its owner.
 *
 * Owner id: the tid in the caller's TCB in full TLS mode, which is what
 * glibc itself writes (each G has its own TCB and tid); in GOSHIM_TLS=errno
 * mode Gs share their M's TCB, so a G is 0x40000000 | (goid & 0x1fffffff),
 * never a real tid. Non-G callers use their kernel tid.
 *
 * Who takes this path: every caller once the runtime runs (goshim_on), not
 * only Gs. A glibc unlock wakes waiters with a kernel FUTEX_WAKE, which
 * cannot reach a parked G; gfutex_wait blocks a non-G caller in the kernel
 * and gfutex_wake reaches both. Before start-up (and after a fork child
 * turned the runtime off) glibc does everything; the representation is
 * glibc's, so a mutex held across start-up is released correctly (in errno
 * mode the owner id changes at start-up: a recursive/errorcheck mutex held
 * by main across start-up then reports EPERM when main unlocks it).
 * A mutex glibc used before start-up (a library's constructor runs before
 * goshim's) and left free is free here: glibc's unlock leaves __lock,
 * __owner and __count 0 and __nusers back where it was, whatever the kind
 * and whether it waited, timed out or woke a waiter (its __lock is 2 while
 * waiters may sleep, 0 once released); __spins, glibc's adaptive estimate,
 * and __elision are not read; pthread_mutexattr_settype's elision hint
 * bits in __kind are ignored (MX_ELISION_FLAGS). So nothing is translated.
 *
 * Known differences from glibc: none for the kinds handled here except
 * adaptive spinning (a fixed MX_SPIN PAUSEs, glibc's __spins estimate is
 * not updated) and cond_wait on a recursive mutex (see cond.c).
 */
#include <errno.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shim/shim.h"
#include "shim/sync.h"

/* glibc's kind bits (nptl/pthreadP.h). */
enum {
    MX_TIMED = PTHREAD_MUTEX_TIMED_NP,
    MX_RECURSIVE = PTHREAD_MUTEX_RECURSIVE_NP,
    MX_ERRORCHECK = PTHREAD_MUTEX_ERRORCHECK_NP,
    MX_ADAPTIVE = PTHREAD_MUTEX_ADAPTIVE_NP,
    MX_KIND_MASK = 3,
    MX_PI = 32,                   /* PTHREAD_MUTEX_PRIO_INHERIT_NP */
    MX_ELISION_FLAGS = 256 | 512, /* elision hints: ignored, the kind is what counts */
    MX_SPIN = 100,                /* adaptive: PAUSEs before parking (glibc's default max) */
    MX_SPIN_ROUNDS = 4,           /* rounds of 30 PAUSEs of a contended lock (lock_slow) */
};

/* The owner id of gp (sync.h: gsync_self). */
static int owner_id(struct g *gp)
{
    if (tls_full()) {
        void *tcb = sched_g_tcb(gp);
        return tcb ? (int)tls_tcb_tid(tcb) : 0;
    }
    return (int)(0x40000000u | (uint32_t)(sched_g_id(gp) & 0x1fffffffu));
}

int gsync_self_slow(void)
{
    if (tls_full())
        return (int)tls_tcb_tid(tls_self());
    struct g *gp = sched_self();
    if (gp != NULL)
        return owner_id(gp);
    return (int)syscall(SYS_gettid);
}

static bool has_id(struct g *gp, void *id)
{
    return owner_id(gp) == *(int *)id;
}

struct g *gmutex_holder(pthread_mutex_t *m, int *gone_id)
{
    int id = __atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED);
    struct g *o = id ? sched_g_find_locked(has_id, &id) : NULL;
    *gone_id = o == NULL ? id : 0;
    return o;
}

void gsync_yield(void)
{
    if (sched_self() != NULL)
        sched_goyield();
    else
        osyield();
}

static inline int mx_kind(pthread_mutex_t *m)
{
    return __atomic_load_n(&m->__data.__kind, __ATOMIC_RELAXED);
}

/* True when goshim's code handles this kind (no robust/PI/PP/pshared bit, no garbage). */
static inline bool mx_simple(int kind)
{
    return (kind & ~(MX_KIND_MASK | MX_PI | MX_ELISION_FLAGS)) == 0;
}

bool gmutex_ours(pthread_mutex_t *m)
{
    return mx_simple(mx_kind(m));
}

static inline bool lock_try(int *word)
{
    int zero = 0;
    return __atomic_compare_exchange_n(word, &zero, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

/* The contended path of glibc's lll_lock: mark the word 2, park until it was 0. */
static int lock_slow(int *word, bool timed, clockid_t clk, const struct timespec *abstime)
{
    int64_t deadline = -1;

    if (timed) {
        int r = gfutex_deadline(clk, abstime, &deadline);
        if (r != 0)
            return r;
    }
    /* Go's sync.Mutex spins as much (runtime_canSpin: 4 rounds of 30 PAUSEs) before it parks;
     * sched_spin_worth says when (glibc's waiter gets the same grace from the system call). */
    for (int round = 0; round < MX_SPIN_ROUNDS && sched_spin_worth(); round++) {
        for (int i = 0; i < 30; i++)
            __builtin_ia32_pause();
        if (__atomic_load_n(word, __ATOMIC_RELAXED) == 0 && lock_try(word))
            return 0;
    }
    if (__atomic_load_n(word, __ATOMIC_RELAXED) == 2)
        goto wait;
    while (__atomic_exchange_n(word, 2, __ATOMIC_ACQUIRE) != 0) {
    wait:
        if (shim_wait_word(WAIT_MUTEX, word, (uint32_t *)word, 2, deadline, 0) ==
            SHIM_WAIT_TIMEDOUT)
            return ETIMEDOUT;
        shim_async_cancel(); /* not holding it: a cancelled thread may go */
    }
    return 0;
}

static int lock_word(pthread_mutex_t *m, int type, bool timed, clockid_t clk,
                     const struct timespec *abstime)
{
    int *word = &m->__data.__lock;

    if (__builtin_expect(lock_try(word), 1))
        return 0;
    if (type == MX_ADAPTIVE) {
        for (int i = 0; i < MX_SPIN; i++) {
            __builtin_ia32_pause();
            if (__atomic_load_n(word, __ATOMIC_RELAXED) == 0 && lock_try(word))
                return 0;
        }
    }
    return lock_slow(word, timed, clk, abstime);
}

static inline void unlock_word(pthread_mutex_t *m)
{
    /* After the exchange the mutex may be freed: gfutex_wake only uses the address. */
    if (__atomic_exchange_n(&m->__data.__lock, 0, __ATOMIC_RELEASE) > 1)
        gfutex_wake((uint32_t *)&m->__data.__lock, 1);
}

static int mutex_lock(pthread_mutex_t *m, int kind, bool timed, clockid_t clk,
                      const struct timespec *abstime)
{
    int type = kind & MX_KIND_MASK;
    int id = gsync_self();
    int r;

    if (type == MX_RECURSIVE) {
        if (m->__data.__owner == id) {
            if (m->__data.__count + 1 == 0)
                return EAGAIN;
            m->__data.__count++;
            return 0;
        }
        r = lock_word(m, type, timed, clk, abstime);
        if (r != 0)
            return r;
        m->__data.__count = 1;
    } else {
        if (type == MX_ERRORCHECK && __atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED) == id)
            return EDEADLK;
        r = lock_word(m, type, timed, clk, abstime);
        if (r != 0)
            return r;
    }
    m->__data.__owner = id;
    m->__data.__nusers++;
    return 0;
}

/* glibc's __pthread_mutex_unlock_usercnt: decr is false for cond waits. */
static int mutex_unlock(pthread_mutex_t *m, int kind, bool decr)
{
    int type = kind & MX_KIND_MASK;

    if (type == MX_RECURSIVE) {
        if (m->__data.__owner != gsync_self())
            return EPERM;
        if (--m->__data.__count != 0)
            return 0;
    } else if (type == MX_ERRORCHECK || (kind & MX_PI)) {
        if (m->__data.__owner != gsync_self() ||
            __atomic_load_n(&m->__data.__lock, __ATOMIC_RELAXED) == 0)
            return EPERM;
    }
    m->__data.__owner = 0;
    if (decr)
        m->__data.__nusers--;
    unlock_word(m);
    return 0;
}

/* Clock ids glibc's futexes accept for absolute timeouts. */
static inline bool clock_ok(clockid_t clk)
{
    return clk == CLOCK_REALTIME || clk == CLOCK_MONOTONIC;
}

SYNC_WRAPPER(pthread_mutex_lock, (pthread_mutex_t * m), (m))
{
    int kind = mx_kind(m);

    chaos_point();
    sched_note_call(); /* the body runs with the runtime on (SYNC_WRAPPER) */
    if (!mx_simple(kind))
        return GLIBC_LOCK(REAL(pthread_mutex_trylock)(m), REAL(pthread_mutex_lock)(m));
    /* Fast path of the default kind: glibc's own sequence. */
    if (__builtin_expect(kind == MX_TIMED, 1) && lock_try(&m->__data.__lock)) {
        m->__data.__owner = gsync_self();
        m->__data.__nusers++;
        return 0;
    }
    return mutex_lock(m, kind, false, CLOCK_REALTIME, NULL);
}

GOSHIM_EXPORT int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *abstime)
{
    int kind = mx_kind(m);

    if (!sync_on() || !mx_simple(kind))
        return GLIBC_WAIT(REAL(pthread_mutex_timedlock)(m, abstime));
    return mutex_lock(m, kind, true, CLOCK_REALTIME, abstime);
}

GOSHIM_EXPORT int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t clk,
                                          const struct timespec *abstime)
{
    int kind = mx_kind(m);

    if (!sync_on() || !mx_simple(kind))
        return GLIBC_WAIT(REAL(pthread_mutex_clocklock)(m, clk, abstime));
    if (!clock_ok(clk))
        return EINVAL;
    return mutex_lock(m, kind, true, clk, abstime);
}

SYNC_WRAPPER(pthread_mutex_trylock, (pthread_mutex_t * m), (m))
{
    int kind = mx_kind(m);
    int id;

    sched_note_call(); /* the body runs with the runtime on (SYNC_WRAPPER) */
    if (!mx_simple(kind))
        return REAL(pthread_mutex_trylock)(m);
    id = gsync_self();
    if ((kind & MX_KIND_MASK) == MX_RECURSIVE) {
        if (m->__data.__owner == id) {
            if (m->__data.__count + 1 == 0)
                return EAGAIN;
            m->__data.__count++;
            return 0;
        }
        if (!lock_try(&m->__data.__lock))
            return EBUSY;
        m->__data.__count = 1;
    } else if (!lock_try(&m->__data.__lock)) {
        if ((kind & (MX_PI | MX_KIND_MASK)) == (MX_PI | MX_ERRORCHECK) && m->__data.__owner == id)
            return EDEADLK;
        return EBUSY;
    }
    m->__data.__owner = id;
    m->__data.__nusers++;
    return 0;
}

SYNC_WRAPPER(pthread_mutex_unlock, (pthread_mutex_t * m), (m))
{
    int kind = mx_kind(m);

    chaos_point();
    sched_note_call(); /* the body runs with the runtime on (SYNC_WRAPPER) */
    if (!mx_simple(kind))
        return REAL(pthread_mutex_unlock)(m);
    return mutex_unlock(m, kind, true);
}

/*
 * For pthread_cond_wait: release m completely (a recursive mutex whatever
 * its depth; the depth goes to *saved_count) without touching __nusers, as
 * glibc does. EPERM for a recursive/errorcheck mutex the caller does not own.
 * glibc's own kinds (robust, PI, pshared) go through glibc.
 */
int gmutex_cond_unlock(pthread_mutex_t *m, unsigned *saved_count)
{
    int kind = mx_kind(m);

    *saved_count = 0;
    if (!mx_simple(kind))
        return REAL(pthread_mutex_unlock)(m);
    if ((kind & MX_KIND_MASK) == MX_RECURSIVE) {
        if (m->__data.__owner != gsync_self())
            return EPERM;
        *saved_count = m->__data.__count;
        m->__data.__count = 1;
    }
    return mutex_unlock(m, kind, false);
}

/* Take m back after a cond wait (also after a timeout), restoring the depth.
 * Returns 0, or glibc's error for its own kinds (EOWNERDEAD for a robust mutex). */
int gmutex_cond_lock(pthread_mutex_t *m, unsigned saved_count)
{
    int kind = mx_kind(m);

    if (!mx_simple(kind))
        return GLIBC_LOCK(REAL(pthread_mutex_trylock)(m), REAL(pthread_mutex_lock)(m));
    lock_word(m, kind & MX_KIND_MASK, false, CLOCK_REALTIME, NULL);
    m->__data.__owner = gsync_self();
    if ((kind & MX_KIND_MASK) == MX_RECURSIVE)
        m->__data.__count = saved_count;
    return 0;
}
