/*
 * The thread block: a G's TCB at the top of its stack block, and the
 * binding of a TCB to a G before it runs (bind_tcb, tls_bind_eager). The
 * G lifecycle that calls these is in proc.c.
 *
 * A G that exits hands its TCB, already installed as FS, to the next G if
 * that one has never run: a stream of short tasks then runs on one FS base
 * and pays a TCB reset instead of an FS write per task (a system call
 * where the CPU has no FSGSBASE).
 *
 * A thread is one block. With per-G TLS and an FS method that takes any
 * address (wrfsbase, arch_prctl), a pthread's TCB, its static TLS, the
 * shim's thread record and a small header are carved out of the top of its
 * stack block, as glibc's pthread_create does (allocatestack.c):
 *
 *   guard | lo ... stack ... sp top | static TLS | struct pthread | record | hdr | hi
 *
 * so a thread costs one stack slot and no malloc but the DTV, and the TCB's
 * page is the first stack page (a blocked thread touches two pages here:
 * struct pthread, the used static TLS, record and header fill the top one,
 * the static TLS surplus and the first frames the next). The stack keeps
 * the TCB through the caches (gstack.keep, .tcb): a reused block's TCB is
 * reset, not rebuilt, and a fresh mapping's zero pages are not
 * cleared again. The header holds the block's gstack, so a joined thread's
 * pthread_t (its TCB) leads back to its block: a joinable thread's block
 * leaves its G at exit with the TCB and stays whole, unused, until the
 * join frees it (sched_tcb_free); a detached thread's block stays with its
 * G for the next thread. When a cache lets a block go cold, the TCB is
 * ended there (tls_tcb_end) before its memory is released. Gs spawned
 * without eager_tls (the runtime's own) keep the malloc'ed TCBs below and
 * never take a block that holds one, and a stack too small to give up the
 * space (below tcbl.keep + TCB_MIN_STACK) keeps its full size and a
 * malloc'ed TCB.
 * In the ldt method a TCB must lie below 4 GiB, in an 8 KiB LDT arena slot
 * (ldt.c): stacks stay where they are, since a million 8 MiB reservations
 * cannot fit below 4 GiB and only 8191 entries exist anyway; the TCB stays
 * in the arena, malloc'ed past it.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "sched.h"
#include "prefetch.h"
#include "threadblock.h"
#include "throw.h"
#include "tls.h"

#define TCBHDR_MAGIC  0x676f7368696d7462ull /* "goshimtb" */
#define TCB_MIN_STACK (16 * 1024)           /* stack left below the TCB, at least */

/* The top of a block that holds a TCB: its gstack, to free it from the TCB. */
struct tcbhdr {
    uint64_t magic;
    void *tcb;
    struct gstack st;
};

/* Set once by sched_tcb_layout_init, before the first spawn; read-only after. */
static struct {
    bool on;      /* pthread Gs get their TCB in their stack block */
    size_t rec;   /* bytes for the shim's record, below the header */
    size_t extra; /* record + header, above struct pthread */
    size_t keep;  /* bytes at the top of a block: TCB, static TLS, record, header */
} tcbl;

static struct tcbhdr *tcbhdr_of_top(char *top)
{
    return (struct tcbhdr *)(top - ((sizeof(struct tcbhdr) + 63) & ~(size_t)63));
}

/* The stack's cache ends a cold block's TCB before releasing its memory. */
static void tcb_keep_release(struct gstack *st)
{
    if (st->tcb) {
        tcbhdr_of_top(st->hi)->magic = 0;
        tls_tcb_end(st->tcb);
    }
}

/*
 * A blocked thread's frames: 640 B from its stack's top, measured parked in
 * pthread_cond_wait (a first call through a lazily bound PLT entry goes
 * deeper once: ld.so's resolver saves the vector registers there). A
 * guess too small costs little: a thread deeper than this takes a second
 * page anyway, and the record it could have kept in the block (512 B) is
 * on the heap; a guess too large costs a page a thread.
 */
#define BLOCKED_FRAMES 768

void g_prefetch_run(struct g *gp)
{
    prefetch_lines(gp, sizeof(struct g));
    const char *tcb = __atomic_load_n(&gp->tcb, __ATOMIC_RELAXED);
    const char *hi = __atomic_load_n(&gp->stack.hi, __ATOMIC_RELAXED);
    size_t keep = __atomic_load_n(&gp->stack.keep, __ATOMIC_RELAXED);
    const char *thr = __atomic_load_n((const char **)&gp->thr, __ATOMIC_RELAXED);
    if (hi) /* the first frames, just below the kept bytes */
        prefetch_lines(hi - keep - 128, 128);
    if (tcb)
        tls_tcb_prefetch_run(tcb);
    if (thr)
        prefetch_lines(thr, tcbl.rec);
}

unsigned tcb_block_pages(void)
{
    size_t page = stack_page_size();
    return tcbl.on ? (unsigned)((tcbl.keep + BLOCKED_FRAMES + page - 1) / page) : 0;
}

/* The next block a P's cache gives: its header, record and TCB, on their way to cache. */
static void tcb_keep_prefetch(const struct gstack *st)
{
    if (!st->tcb)
        return;
    const char *rec = (const char *)tcbhdr_of_top(st->hi) - tcbl.rec;
    prefetch_lines(rec, (size_t)(st->hi - rec));
    tls_tcb_prefetch(st->tcb);
}

void sched_tcb_layout_init(size_t record_size)
{
    tcbl.on = tls_full() && tls_fs_method != TLS_FS_LDT;
    size_t hdr = (sizeof(struct tcbhdr) + 63) & ~(size_t)63;
    tcbl.rec = (record_size + 63) & ~(size_t)63;
    /*
     * One page a thread where it can be: with a small static TLS surplus
     * (glibc.rtld.optional_static_tls=0 and glibc.rtld.nns=1, the user's
     * tunables; see tls.c's essay) struct pthread, the static TLS and a
     * blocked thread's frames fit in the block's top page if the shim's
     * record is not there too. Then the record is malloc'ed (dense, 512 B)
     * instead of costing each thread a second page (4 KiB).
     */
    size_t page = stack_page_size();
    if (tcbl.on && tls_tcb_space(tcbl.rec + hdr) + BLOCKED_FRAMES > page &&
        tls_tcb_space(hdr) + BLOCKED_FRAMES <= page)
        tcbl.rec = 0;
    tcbl.extra = tcbl.rec + hdr;
    tcbl.keep = tcbl.on ? tls_tcb_space(tcbl.extra) : 0;
    if (tcbl.on) {
        stack_set_keep_release(tcb_keep_release);
        stack_set_keep_prefetch(tcb_keep_prefetch);
    }
    /* A new thread touches its TCB and its first frames at once: populated in batches. */
    size_t pop = tcbl.on ? tcbl.keep + BLOCKED_FRAMES : 4096;
    stack_set_populate(pop < 16384 ? pop : 16384); /* a program with a large static TLS */
}

/* In a block's TCB: its header (set at every bind; a TCB made elsewhere reads NULL). */
static __thread struct tcbhdr *tls_block __attribute__((tls_model("initial-exec")));

static struct tcbhdr *tcbhdr_of_tcb(void *tcb)
{
    if (!tcbl.on)
        return NULL;
    struct tcbhdr *h = *(struct tcbhdr **)tls_var_in(tcb, &tls_block);
    GOSHIM_ASSERT(!h || (h->magic == TCBHDR_MAGIC && h->tcb == tcb));
    return h;
}

void *sched_g_record(struct g *gp, bool *zeroed)
{
    if (!tcbl.on || !tcbl.rec || !gp->stack.tcb || gp->tcb != gp->stack.tcb)
        return NULL;
    *zeroed = gp->stack.fresh != 0;
    return (char *)tcbhdr_of_top(gp->stack.hi) - tcbl.rec;
}

/* g_drop_stack gives gp's stack back (the TCB in it goes with it). */
void g_drop_stack(struct p *pp, struct g *gp)
{
    if (!gp->stack.lo)
        return;
    if (gp->stack.tcb && gp->tcb == gp->stack.tcb) {
        gp->tcb = NULL;
        gp->flags &= ~(uint32_t)G_TCB_DIRTY;
    }
    stack_free(pp ? &pp->stackcache : NULL, &gp->stack);
    memset(&gp->stack, 0, sizeof gp->stack);
}

/*
 * tcb_bind_block gives a pthread G, before it runs, a stack block of the
 * size it asked for with a TCB at its top: its own, else one from the
 * caches (its TCB reset, or made if the cache let it go cold), else a
 * fresh slot (a TCB made on zero pages). Returns 0, 1 when the stack is too
 * small to hold a TCB (the caller gives a malloc'ed one), or EAGAIN.
 */
/* pp again after a call that may run the program's free or calloc (the TCB's DTV and
 * dynamic TLS): waiting there for a program's lock, the G may resume on another M and P
 * (gfutex_wait). NULL stays NULL (not called from a G with a P). */
static struct p *p_again(struct p *pp)
{
    return pp ? getm()->p : NULL;
}

static int tcb_bind_block(struct p *pp, struct g *gp)
{
    if (gp->want_stackaddr || gp->want_stacksize < tcbl.keep + TCB_MIN_STACK)
        return 1;
    struct gstack *st = &gp->stack;
    if (st->lo && ((size_t)(st->hi - st->lo) != gp->want_stacksize || st->guard != gp->want_guard ||
                   st->kind == STACK_USER))
        g_drop_stack(pp, gp);
    if (gp->tcb && gp->tcb != st->tcb) { /* a malloc'ed one, from an earlier life */
        tls_tcb_destroy(gp->tcb);
        gp->tcb = NULL;
        pp = p_again(pp);
    }
    if (!st->lo && g_stack_alloc(pp, gp) != 0)
        return EAGAIN;
    if (st->tcb) {
        tls_tcb_reset(st->tcb);
    } else {
        st->tcb = tls_tcb_new_at(st->hi, tcbl.extra, st->fresh != 0);
        if (!st->tcb) {
            g_drop_stack(p_again(pp), gp);
            return EAGAIN;
        }
        st->keep = tcbl.keep;
    }
    gp->tcb = st->tcb;
    struct tcbhdr *h = tcbhdr_of_top(st->hi);
    h->magic = TCBHDR_MAGIC;
    h->tcb = st->tcb;
    h->st = *st;
    *(struct tcbhdr **)tls_var_in(st->tcb, &tls_block) = h;
    return 0;
}

/* Bind a TCB to a G about to run for the first time (full TLS mode). */
void bind_tcb(struct m *mp, struct g *gp)
{
    if (gp->flags & G_TCB_BOUND) {
        gp->flags &= ~(uint32_t)G_TCB_BOUND; /* bound at spawn (tls_bind_eager) */
        goto stack;
    }
    /* Before the TLS images are copied: late ones after this are caught up (tls_static.c). */
    gp->tls_gen = __atomic_load_n(&sched.tls_static_gen, __ATOMIC_ACQUIRE);
    struct g *dead = mp->rel.kind == REL_EXIT ? mp->rel.gp : NULL;
    if (dead && dead->tcb && dead->tcb == mp->curfs && !(dead->flags & (G_MAIN | G_KEEP_TCB)) &&
        !dead->stack.tcb && !gp->stack.tcb) { /* block TCBs stay in their blocks */
        /* Hand the exiting G's TCB, already installed, to the new G. */
        void *t = gp->tcb;
        uint32_t dirty = gp->flags & G_TCB_DIRTY;
        gp->tcb = dead->tcb;
        gp->flags |= G_TCB_DIRTY;
        dead->tcb = t;
        dead->flags = (dead->flags & ~(uint32_t)G_TCB_DIRTY) | dirty;
    }
    if (gp->tcb == NULL && gp->stack.tcb) {
        gp->tcb = gp->stack.tcb; /* a block's, left by an earlier thread */
        gp->flags |= G_TCB_DIRTY;
    }
    if (gp->tcb == NULL) {
        gp->tcb = tls_tcb_new();
        if (gp->tcb == NULL)
            goshim_throw("execute: out of memory for a thread control block");
    } else if (gp->flags & G_TCB_DIRTY) {
        tls_tcb_reset(gp->tcb);
    }
    gp->flags |= G_TCB_DIRTY;
    *(struct g **)((char *)gp->tcb + sched.tls_g_off) = gp;
stack:
    tls_tcb_set_stack(gp->tcb, gp->stack.lo - gp->stack.guard,
                      (size_t)(gp->stack.hi - gp->stack.lo) + gp->stack.guard, gp->stack.guard);
}

/*
 * Give gp its TCB now rather than at first run, so that its pthread_t (the
 * TCB address, as in glibc) exists when pthread_create returns.
 */
/*
 * Give gp a TCB before it runs: its own (reset if used), else one of the
 * TCBs joined threads left in pp's cache (reset), else a new one
 * (malloc and every TLS image copied). pp is the caller's P, or NULL.
 */
int tls_bind_eager(struct p *pp, struct g *gp)
{
    gp->tls_gen = __atomic_load_n(&sched.tls_static_gen, __ATOMIC_ACQUIRE); /* as bind_tcb */
    if (tcbl.on) {
        int r = tcb_bind_block(pp, gp);
        if (r == 0) {
            gp->flags |= G_TCB_DIRTY | G_TCB_BOUND;
            *(struct g **)((char *)gp->tcb + sched.tls_g_off) = gp;
            return 0;
        }
        if (r != 1)
            return r;
        pp = p_again(pp);
        if (gp->tcb && gp->tcb == gp->stack.tcb) /* too small a stack wanted: not this one's */
            g_drop_stack(pp, gp);
    }
    if (gp->tcb == NULL && pp && pp->ntcbcache > 0) {
        gp->tcb = pp->tcbcache[--pp->ntcbcache];
        gp->flags |= G_TCB_DIRTY;
    }
    if (gp->tcb == NULL) {
        gp->tcb = tls_tcb_new();
        if (gp->tcb == NULL)
            return EAGAIN;
    } else if (gp->flags & G_TCB_DIRTY) {
        tls_tcb_reset(gp->tcb);
    }
    gp->flags |= G_TCB_DIRTY | G_TCB_BOUND;
    *(struct g **)((char *)gp->tcb + sched.tls_g_off) = gp;
    return 0;
}

/*
 * sched_tcb_free takes the TCB of a joined thread (installed nowhere, its
 * malloc words moved out): it goes to the calling G's P cache for the next
 * pthread_create there, else it is destroyed. From G code or any thread.
 */
void sched_tcb_free(void *tcb)
{
    struct m *mp = acquirem(); /* the P stays ours while we touch its cache */
    struct p *pp = mp && !mp->ong0 ? mp->p : NULL;
    struct tcbhdr *h = tcbhdr_of_tcb(tcb);
    if (h) { /* a block: back to the stack caches with its TCB */
        struct gstack st = h->st;
        stack_free(pp ? &pp->stackcache : NULL, &st);
        releasem(mp);
        return;
    }
    if (pp && pp->ntcbcache < TCB_PCACHE_MAX) {
        pp->tcbcache[pp->ntcbcache++] = tcb;
        releasem(mp);
        return;
    }
    releasem(mp);
    tls_tcb_destroy(tcb);
}
