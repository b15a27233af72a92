/*
 * The thread block (threadblock.c) as proc.c uses it: a G's stack and TCB
 * given back together, and a TCB bound at spawn; what runq.c prefetches
 * and trace.c reports of it. Internal to sched/.
 */
#ifndef GOSHIM_THREADBLOCK_H
#define GOSHIM_THREADBLOCK_H

struct g;
struct p;

/*
 * g_prefetch_run asks for the lines gp touches when it next runs: its
 * descriptor, the top of its stack, its TCB's header and malloc words
 * and the shim's record. Reads gp's fields racily (gp may be running
 * elsewhere): only prefetch addresses come of them.
 */
void g_prefetch_run(struct g *gp);

/*
 * tcb_block_pages: how many pages at the top of a block a thread blocked
 * right after it started holds (its TCB, static TLS, the shim's record if
 * there and its first frames): 1 with glibc's static TLS surplus small
 * enough (goshim run --lean-tls), 2 by default; 0 when TCBs do not live
 * in stack blocks (the ldt method, GOSHIM_TLS=errno).
 */
unsigned tcb_block_pages(void);

/* g_drop_stack gives gp's stack back (the TCB in it goes with it). */
void g_drop_stack(struct p *pp, struct g *gp);

/*
 * tls_bind_eager gives gp a TCB before it runs (pp: the caller's P, or
 * NULL). Returns 0 or EAGAIN.
 */
int tls_bind_eager(struct p *pp, struct g *gp);

#endif
