/*
 * Observability: GOSHIM_SCHEDTRACE lines in Go's format, printed by
 * sysmon (sysmon.c), and GOSHIM_STATS counters at exit.
 *
 *   SCHED 1000ms: gomaxprocs=2 idleprocs=0 threads=5 spinningthreads=0 idlethreads=1 runqueue=3 [12 0]
 *
 * threads counts the Ms plus sysmon (as Go);
 * the bracket lists each P's local run queue length. With SCHEDDETAIL one
 * line per P, M and G follows, as Go's scheddetail=1.
 *
 * Everything is read without stopping the world: the numbers are a
 * snapshot that may be slightly inconsistent, as Go's are.
 */
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <pthread.h>

#include "netpoll.h"
#include "preempt.h"
#include "sched.h"
#include "threadblock.h"
#include "throw.h"
#include "tls.h"

static const char *const gstatus_name[] = {"idle",    "runnable", "running",
                                           "syscall", "waiting",  "dead"};
static const char *const waitreason_name[] = {"", "wait group", "semacquire", "test", "futex"};

void schedtrace(bool detailed)
{
    char buf[4096];
    size_t n;
    int64_t now = nanotime();
    /* Before sched.lock, which preempt_stats takes to sum the Ms' ticks (not recursive). */
    struct preempt_stats ps;
    if (detailed)
        preempt_stats(&ps);
    runtime_lock(&sched.lock);
    n = rt_snprint(buf, sizeof buf,
                   "SCHED %ldms: gomaxprocs=%d idleprocs=%d threads=%d spinningthreads=%d "
                   "idlethreads=%d runqueue=%d",
                   (long)((now - sched.starttime) / 1000000), sched.gomaxprocs, sched.npidle,
                   sched.mcount + sysmon_threads(),
                   __atomic_load_n(&sched.nmspinning, __ATOMIC_RELAXED), sched.nmidle,
                   sched.runqsize);
    if (!detailed) {
        for (int32_t i = 0; i < sched.gomaxprocs && n < sizeof buf - 32; i++)
            n +=
                rt_snprint(buf + n, sizeof buf - n, "%s%u", i ? " " : " [", runqlen(sched.allp[i]));
        n += rt_snprint(buf + n, sizeof buf - n, "]\n");
        runtime_unlock(&sched.lock);
        rt_print(2, "%s", buf);
        return;
    }
    rt_print(2, "%s\n", buf);
    rt_print(2,
             "  preempt: requests=%lu done=%lu refused=%lu stale=%lu handoffs=%lu cut=%lu "
             "demoted=%lu\n",
             (unsigned long)ps.requests, (unsigned long)ps.done, (unsigned long)ps.refused,
             (unsigned long)ps.stale, (unsigned long)ps.handoffs, (unsigned long)ps.cut,
             (unsigned long)ps.demoted);
    for (int32_t i = 0; i < sched.gomaxprocs; i++) {
        struct p *pp = sched.allp[i];
        struct m *mp = pp->m;
        rt_print(2, "  P%d: status=%u schedtick=%u m=%ld runqsize=%u runnext=%d gfreecnt=%d\n",
                 pp->id, pp->status, pp->schedtick, mp ? (long)mp->id : -1L, runqlen(pp),
                 pp->runnext != NULL, pp->gfreecnt);
    }
    for (struct m *mp = sched.allm; mp; mp = mp->alllink) {
        if (mp->retired)
            continue;
        struct p *pp = mp->p;
        struct g *gp = mp->curg;
        rt_print(2, "  M%ld: p=%d curg=%ld spinning=%s tid=%d\n", (long)mp->id, pp ? pp->id : -1,
                 gp ? (long)gp->goid : -1L, mp->spinning ? "true" : "false", mp->tid);
    }
    runtime_unlock(&sched.lock);
    runtime_lock(&sched.allglock);
    for (struct g *gp = sched.allg; gp; gp = gp->alllink) {
        uint32_t st = g_status(gp);
        if (st == Gdead)
            continue;
        struct m *mp = gp->m;
        const char *wr = st == Gwaiting && gp->waitreason < waitReasonCount
                             ? waitreason_name[gp->waitreason]
                             : "";
        char what[320] = "";
        if (gp->flags & G_STARTED)
            sched_describe(gp, what, sizeof what);
        rt_print(2, "  G%lu: status=%u(%s%s%s) m=%ld%s\n", (unsigned long)gp->goid, st,
                 st < 6 ? gstatus_name[st] : "?", *wr ? " " : "", wr,
                 st == Grunning && mp ? (long)mp->id : -1L, what);
    }
    runtime_unlock(&sched.allglock);
}

struct sched_counters {
    uint64_t spawned, schedules, steals, stolen, globget, overflows, parks, readies, yields;
    uint64_t stopm, woken, syscalls;
    int32_t mcount;
};

static void collect(struct sched_counters *c)
{
    *c = (struct sched_counters){0};
    c->spawned = __atomic_load_n(&sched.nspawned, __ATOMIC_RELAXED);
    for (int32_t i = 0; i < sched.gomaxprocs; i++) {
        struct p *pp = sched.allp[i];
        c->spawned += __atomic_load_n(&pp->nspawn, __ATOMIC_RELAXED);
        c->schedules += __atomic_load_n(&pp->nschedule, __ATOMIC_RELAXED);
        c->steals += __atomic_load_n(&pp->nsteal, __ATOMIC_RELAXED);
        c->stolen += __atomic_load_n(&pp->nstolen, __ATOMIC_RELAXED);
        c->globget += __atomic_load_n(&pp->nglobget, __ATOMIC_RELAXED);
        c->overflows += __atomic_load_n(&pp->noverflow, __ATOMIC_RELAXED);
        c->parks += __atomic_load_n(&pp->npark, __ATOMIC_RELAXED);
        c->readies += __atomic_load_n(&pp->nready, __ATOMIC_RELAXED);
        c->yields += __atomic_load_n(&pp->ngosched, __ATOMIC_RELAXED);
    }
    runtime_lock(&sched.lock);
    for (struct m *mp = sched.allm; mp; mp = mp->alllink) {
        c->stopm += __atomic_load_n(&mp->nstopm, __ATOMIC_RELAXED);
        c->woken += __atomic_load_n(&mp->nwoken, __ATOMIC_RELAXED);
        c->syscalls += __atomic_load_n(&mp->nsyscall, __ATOMIC_RELAXED);
    }
    c->mcount = sched.mcount;
    runtime_unlock(&sched.lock);
}

/* Everything the counters lines print, at one moment. */
struct snapshot {
    struct sched_counters c;
    struct stack_stats ss;
    struct tls_stats ts;
    struct netpoll_stats ns;
    struct preempt_stats ps;
    uint64_t fds_moved, fds_lost, retakes, sysmon_rounds;
};

static void snapshot_take(struct snapshot *s)
{
    collect(&s->c);
    stack_get_stats(&s->ss);
    tls_get_stats(&s->ts);
    netpoll_stats(&s->ns);
    preempt_stats(&s->ps);
    ownfd_counts(&s->fds_moved, &s->fds_lost);
    s->retakes = sysmon_retakes();
    s->sysmon_rounds = sysmon_rounds();
}

/* The counters at the fork that made this process: a child's lines count what the child
 * did (zero in the process that started goshim). */
static struct snapshot since;

FORK_TEXT void stats_fork_child(void)
{
    if (ownfd_get(OWNFD_STATS) >= 0)
        snapshot_take(&since);
}

void stats_print(int fd)
{
    struct snapshot now;
    snapshot_take(&now);
/* A counter's growth in this process. */
#define D(f) ((unsigned long)(now.f - since.f))
    rt_print(
        fd,
        "goshim stats: procs=%d threads=%d tls=%s fs=%s gs_created=%lu switches=%lu steals=%lu "
        "stolen_gs=%lu global_batches=%lu overflows=%lu parks=%lu readies=%lu yields=%lu "
        "m_parks=%lu m_wakeups=%lu peak_ms=%d\n",
        sched.gomaxprocs, now.c.mcount, tls_full() ? "full" : "errno",
        tls_fs_method_name(tls_fs_method), D(c.spawned), D(c.schedules), D(c.steals), D(c.stolen),
        D(c.globget), D(c.overflows), D(c.parks), D(c.readies), D(c.yields), D(c.stopm), D(c.woken),
        now.c.mcount);
    rt_print(fd,
             "goshim stats: stacks_mmapped=%lu stacks_unmapped=%lu stack_cache_hits=%lu "
             "arena_stacks=%lu tcbs_created=%lu tcbs_reset=%lu ldt_tcbs=%lu ldt_overflow=%lu "
             "block_pages=%u\n",
             D(ss.mmaps), D(ss.munmaps), D(ss.cache_hits), D(ss.arena_stacks), D(ts.tcbs_created),
             D(ts.tcbs_reset), D(ts.ldt_tcbs), D(ts.ldt_overflow), tcb_block_pages());
    rt_print(fd,
             "goshim stats: netpoll_parks=%lu netpolls=%lu netpoll_events=%lu direct_readies=%lu "
             "syscalls=%lu handoffs=%lu own_fds_moved=%lu own_fds_lost=%lu fds_classified=%lu "
             "sysmon_rounds=%lu helpers=%u\n",
             D(ns.parks), D(ns.polls), D(ns.events), D(ns.direct), D(c.syscalls), D(retakes),
             D(fds_moved), D(fds_lost), D(ns.classified), D(sysmon_rounds), sched_helpers_made());
    unsigned long walks = D(ps.walks);
    rt_print(fd,
             "goshim stats: preempt_requests=%lu preemptions=%lu preempt_refused=%lu "
             "preempt_handoffs=%lu slices_cut=%lu wake_cuts=%lu spinners_demoted=%lu "
             "preempted_to_global=%lu "
             "slice_us=%ld%s walk=%s "
             "walks=%lu walk_ns_avg=%lu walk_faults=%lu ticks=%lu tick_cuts=%lu timer_fails=%lu "
             "preempt_gate=%lu\n",
             D(ps.requests), D(ps.done), D(ps.refused), D(ps.handoffs), D(ps.cut), D(ps.wake_cut),
             D(ps.demoted), D(ps.to_global), (long)(preempt_slice() / 1000),
             preempt_when_waiting() ? "(kernel)" : "", now.ps.walker, walks,
             walks ? D(ps.walk_ns) / walks : 0, D(ps.walk_faults), D(ps.ticks), D(ps.tickcuts),
             D(ps.timerfail), D(ps.gate));
    for (int k = 0; k < 2; k++) /* each unwinder's walks */
        if (now.ps.by[k].n)
            rt_print(fd,
                     "goshim stats: walks_%s=%lu walk_%s_ns_avg=%lu walk_%s_ns_p50=%lu "
                     "walk_%s_ns_p99=%lu walk_verdicts_differ=%lu\n",
                     k ? "libunwind" : "libgcc", now.ps.by[k].n, k ? "libunwind" : "libgcc",
                     now.ps.by[k].ns / now.ps.by[k].n, k ? "libunwind" : "libgcc",
                     now.ps.by[k].p50_ns, k ? "libunwind" : "libgcc", now.ps.by[k].p99_ns,
                     now.ps.differ);
#undef D
}

/* A private copy of stderr, taken at start-up: programs that close fd 2
 * in their own atexit handlers (coreutils' close_stdout) still get the
 * counters, and they go where stderr went. It is one of goshim's own
 * descriptors (ownfd.c): high, and not open as far as the program can
 * tell; stderr itself if it was lost. */
static struct stat stats_st; /* the file stderr was: checked again at exit */

void stats_open(void)
{
    struct m *mp = ownfd_lock();
    int fd = ownfd_dup_high(2);
    if (fd >= 0 && rt_syscall(SYS_fstat, fd, &stats_st, 0) != 0) {
        rt_syscall(SYS_close, fd, 0, 0);
        fd = -1;
    }
    ownfd_set(OWNFD_STATS, fd);
    ownfd_unlock(mp);
}

void stats_at_exit(void)
{
    int fd = ownfd_get(OWNFD_STATS);
    struct stat st;
    if (fd < 0 || rt_syscall(SYS_fstat, fd, &st, 0) != 0 || st.st_dev != stats_st.st_dev ||
        st.st_ino != stats_st.st_ino)
        fd = 2; /* lost behind goshim's back (a system call it did not see) */
    stats_print(fd);
    leaks_print(fd);
}
