/*
 * Late static TLS: the initial image of an initial-exec module that is
 * dlopen'ed while Gs exist, copied into every G's TCB.
 *
 * Model. A module built with -ftls-model=initial-exec (DF_STATIC_TLS) gets
 * its TLS block at a fixed offset below the thread pointer, in glibc's
 * static TLS surplus, and its code reaches the block as %fs:offset, with
 * no DTV lookup. glibc's dlopen copies the module's image (p_filesz bytes,
 * then zeros to p_memsz) into the block of every thread it knows
 * (_dl_init_static_tls walks dl_stack_used and dl_stack_user) before it
 * returns, and _dl_allocate_tls_init copies it into every TCB made later.
 * goshim's TCBs are on neither list (they must not be: setxid signalling,
 * the fork child's reclaim_stacks and libthread_db walk them), so a G
 * that existed at the dlopen, the caller included, found whatever the
 * surplus held there: zeros in a fresh block, a previous thread's bytes
 * in a reused one. The shim's dlopen (shim/dlopen.c) finds the modules a
 * call loaded with static TLS and hands each here, once.
 *
 * Which TCBs get the image, and how the races with Gs that start or exit
 * meanwhile are closed:
 *   - TCBs made or reset after the module was loaded (new threads, the
 *     caches, the dead Gs' TCBs that a reuse resets) have it from
 *     _dl_allocate_tls_init.
 *   - A started G that is not dead: copied by sched_tls_static_init,
 *     under allglock, the caller included. The main G is skipped: its TCB
 *     is glibc's own, on dl_stack_user, done by glibc.
 *   - A G that has not started (spawned, maybe with a TCB already bound at
 *     pthread_create) is skipped by the walk: execute calls
 *     tls_static_catch_up at its first run, before any of its code, when
 *     sched.tls_static_gen moved since its TCB got its images (gp->tls_gen,
 *     read before the images were copied). The walk bumps the generation
 *     and then issues membarrier(PRIVATE_EXPEDITED), so every M that then
 *     reads the old generation in execute had stored the G's TCB and
 *     G_STARTED where the walk sees them: either the walk copies or the G
 *     catches up (an asymmetric Dekker: execute's side costs a compiler
 *     barrier and a load, no fence). A copy done twice into a G that has
 *     not run writes the same bytes.
 *   - A G that exits: release_commit marks it dead, then waits for a walk
 *     in progress (sched.tls_static_walking) to end before its TCB can be
 *     freed or reused, so the walk never writes into a freed TCB.
 *
 * Remaining gaps (also in README's Limits where a user may meet them):
 *   - The module's constructors run on the caller before the copy: on a G
 *     other than the main thread they see the block unset, and what they
 *     store there is overwritten by the image. Rejected: running the real
 *     dlopen with the M's own TCB as the FS base (glibc then initialises
 *     it), which would run the program's constructors, which may block
 *     or switch, on the M's TLS.
 *   - Between the loader's return and the copy another thread may already
 *     reach the module (RTLD_GLOBAL symbols, a second dlopen of it that
 *     found it loaded): what it stores in its block first is overwritten.
 *   - Without membarrier (kernels before 4.14, a seccomp filter) a G
 *     starting exactly during the walk may miss the image.
 *   - At most TLS_LATE_MAX modules are remembered (with a copy of the
 *     image: the module may be unmapped by a dlclose before the shim
 *     forgets it) for the catch-up and for doing each once; past that, or
 *     with no memory for the copy, the walk still copies.
 *   - A module is known by its base and TLS module id: one unloaded by a
 *     dlclose that is not goshim's (libc's own) and loaded again at the
 *     same base with the same id is taken as done; and a G that first
 *     runs after a module was unloaded, before it is forgotten, gets its
 *     image at its old offset: harmless unless a module loaded past the
 *     wrapper (dlmopen) has its block there.
 *   - dlmopen is not interposed: its modules are glibc's alone.
 */
#include <stdlib.h>
#include <string.h>

#include "sched.h"
#include "throw.h"
#include "tls.h"

enum { TLS_LATE_MAX = 64 };

/* A module whose image went to every G. */
struct tls_late {
    uintptr_t base; /* the module, as dl_iterate_phdr names it: load base, TLS module id */
    size_t modid;
    ptrdiff_t off; /* its block, from the thread pointer (< 0: TLS variant II) */
    void *image;   /* a malloc'ed copy: the module may be unmapped before it is forgotten */
    size_t filesz, memsz;
    uint64_t gen; /* sched.tls_static_gen once it was added */
};

static struct {
    struct tls_late mod[TLS_LATE_MAX]; /* allglock */
    int n;                             /* allglock; atomic reads (sched_tls_static_count) */
} late;

static void late_copy(void *tcb, const struct tls_late *e)
{
    char *dst = (char *)tcb + e->off;
    memcpy(dst, e->image, e->filesz);
    memset(dst + e->filesz, 0, e->memsz - e->filesz);
}

/* The TCB the walk copies into, or NULL: a started G, alive, with a TCB of goshim's. */
static void *walk_tcb(struct g *gp)
{
    uint32_t st = g_status(gp);
    if (st == Gdead || st == Gidle)
        return NULL;
    uint32_t fl = __atomic_load_n(&gp->flags, __ATOMIC_RELAXED);
    if (!(fl & G_STARTED) || (fl & G_MAIN)) /* not started: execute catches up; main: glibc's */
        return NULL;
    return __atomic_load_n(&gp->tcb, __ATOMIC_ACQUIRE);
}

/*
 * sched_tls_static_init copies the static TLS image of the module (base,
 * modid) into every live G's TCB, once per module. block is the module's
 * block in the caller's TLS (from __tls_get_addr); image holds filesz
 * bytes, the rest up to memsz is zeroed. Returns whether it copied (false:
 * errno mode, done before, or block is not in the static TLS).
 */
bool sched_tls_static_init(uintptr_t base, size_t modid, void *block, const void *image,
                           size_t filesz, size_t memsz)
{
    struct tls_stats ts;
    tls_get_stats(&ts);
    ptrdiff_t off = (char *)block - (char *)tls_self();
    if (!tls_full() || memsz == 0 || filesz > memsz || off >= 0 || (size_t)-off > ts.static_size ||
        memsz > (size_t)-off)
        return false;
    void *copy = malloc(filesz + 1); /* NULL: copied by the walk, not remembered */
    if (copy)
        memcpy(copy, image, filesz);
    struct m *mp = acquirem(); /* not preempted while others wait for allglock */
    runtime_lock(&sched.allglock);
    for (int i = 0; i < late.n; i++) {
        if (late.mod[i].base == base && late.mod[i].modid == modid) {
            runtime_unlock(&sched.allglock);
            releasem(mp);
            free(copy);
            return false; /* another caller's dlopen of it got here first */
        }
    }
    struct tls_late e = {base, modid, off, (void *)image, filesz, memsz, 0};
    __atomic_store_n(&sched.tls_static_walking, 1, __ATOMIC_SEQ_CST);
    e.gen = __atomic_add_fetch(&sched.tls_static_gen, 1, __ATOMIC_SEQ_CST);
    bool kept = copy && late.n < TLS_LATE_MAX;
    if (kept) {
        late.mod[late.n] = e;
        late.mod[late.n].image = copy;
        __atomic_store_n(&late.n, late.n + 1, __ATOMIC_RELEASE);
    }
    m_fence_all(); /* none: a G that starts right now may miss it (see the top) */
    for (struct g *gp = sched.allg; gp; gp = gp->alllink) {
        void *tcb = walk_tcb(gp);
        if (tcb)
            late_copy(tcb, &e);
    }
    __atomic_store_n(&sched.tls_static_walking, 0, __ATOMIC_RELEASE);
    runtime_unlock(&sched.allglock);
    releasem(mp);
    if (!kept)
        free(copy);
    return true;
}

/* The number of modules remembered: the shim's dlclose skips the lookup when 0. */
int sched_tls_static_count(void)
{
    return __atomic_load_n(&late.n, __ATOMIC_ACQUIRE);
}

/*
 * sched_tls_static_forget drops the modules that loaded(base, modid, arg)
 * says are gone (after a dlclose), so that a module loaded later at the
 * same base with the same id is new again.
 */
void sched_tls_static_forget(bool (*loaded)(uintptr_t base, size_t modid, void *arg), void *arg)
{
    struct m *mp = acquirem();
    runtime_lock(&sched.allglock);
    int k = 0;
    void *gone[TLS_LATE_MAX];
    int ngone = 0;
    for (int i = 0; i < late.n; i++) {
        if (loaded(late.mod[i].base, late.mod[i].modid, arg))
            late.mod[k++] = late.mod[i]; /* the order of their generations is kept */
        else
            gone[ngone++] = late.mod[i].image;
    }
    __atomic_store_n(&late.n, k, __ATOMIC_RELEASE);
    runtime_unlock(&sched.allglock);
    releasem(mp);
    for (int i = 0; i < ngone; i++)
        free(gone[i]);
}

/*
 * tls_static_catch_up copies into gp's TCB the images added since it got
 * its images (gp->tls_gen), oldest first: a module loaded where one that
 * was unloaded (and not forgotten yet) had its block comes after it. On
 * g0, for a G about to run for the first time.
 */
void tls_static_catch_up(struct g *gp)
{
    runtime_lock(&sched.allglock);
    for (int i = 0; i < late.n; i++)
        if (late.mod[i].gen > gp->tls_gen)
            late_copy(gp->tcb, &late.mod[i]);
    gp->tls_gen = __atomic_load_n(&sched.tls_static_gen, __ATOMIC_RELAXED);
    runtime_unlock(&sched.allglock);
}

void tls_static_exit_wait(void)
{
    if (__atomic_load_n(&sched.tls_static_walking, __ATOMIC_SEQ_CST)) {
        runtime_lock(&sched.allglock); /* the walk holds it to its end */
        runtime_unlock(&sched.allglock);
    }
}
