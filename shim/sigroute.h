/*
 * What shim/signal.c (the handlers and the dispatcher), shim/sigroute.c
 * (the router of process signals) and shim/sigmask.c (masks and waits)
 * share.
 */
#ifndef GOSHIM_SHIM_SIGROUTE_H
#define GOSHIM_SHIM_SIGROUTE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#if __has_include(<sys/pidfd.h>)
#include <sys/pidfd.h>
#else
int pidfd_send_signal(int pidfd, int sig, siginfo_t *info, unsigned int flags); /* glibc < 2.36 */
#endif

/* Signals whose kernel handler is the dispatcher (bit sig-1); atomic. signal.c. */
extern uint64_t sig_dispatched;
/* Dispatched signals that no thread took when they came: given back to the kernel, pending
 * for the process (queued, in order), and blocked in the router until a thread unblocks
 * them (the kernel then delivers them to that thread's M); atomic. */
extern uint64_t sig_parked;
extern pid_t sig_self_pid;
/* sig_default_gen[sig] is bumped when the program gives a signal it handled back to the
 * kernel's default; sig_ringing counts the bells to other threads being queued
 * (sigdeliver.c), which install_default (signal.c) waits for. Atomic. */
extern uint32_t sig_default_gen[65];
extern uint32_t sig_ringing;
/* Of sig_ringing, the calling thread's (a handler may have interrupted one). */
extern __thread uint32_t sig_ringing_here __attribute__((tls_model("initial-exec")));
/* True on the router's own thread. */
extern __thread bool sig_on_router __attribute__((tls_model("initial-exec")));

/* sigroute.c: wake the router (something posted, or sig_dispatched changed). */
void sig_router_kick(void);
/* Signal-safe: queue sig for the router. Its position in the queue, or UINT64_MAX when it
 * went to the overflow set. */
uint64_t sig_post(int sig, const siginfo_t *info);
/* sig_post, the router woken only if kick (else the caller's M hands it on soon: see
 * sig_route_posted). */
uint64_t sig_post_kick(int sig, const siginfo_t *info, bool kick);
/* Give sig back to the kernel, pending for the process, with its siginfo (sigroute.c). */
void sig_park_in_kernel(int sig, const siginfo_t *info);
/* A signal taken from the kernel: its own siginfo if the router parked it. */
const siginfo_t *sig_unparked(const siginfo_t *info, siginfo_t *copy);
/* Signals posted to the router that it has not handed on yet. */
bool sig_router_busy(void);
/* The program's action for sig (signal.c): 0 no handler (ignored or default), 1 a handler
 * with SA_RESTART, 2 one without. */
int sig_handler_restarts(int sig);
/* The router's work done by an M that holds no lock (sched_hooks.route_posted, here): the
 * signals posted so far, in order, each handed to a thread that takes it, up to the first
 * that needs the router (none takes it, or the queue overflowed), which is left to it. Not
 * here (an M that may not route now): the router woken if anything is posted. */
void sig_route_posted(bool here);
/* The routed signals an idle M lets through and hands on itself (sched_hooks.idle_lets). */
uint64_t shim_idle_lets(void);
/* Whether the calling thread runs a handler of the program's (sched_hooks.in_handler). */
bool shim_in_handler(void);
/* A fork child's router, started if a signal was posted to it before it ran (sigroute.c). */
void sig_router_settle(void);
/* signal.c: a thread that takes sig (and does not sigwait for it) discards it: routed, its
 * action ignores it. */
bool sig_discarded(int sig);
/* signal.c: in a fork child, before anything else. */
void sig_act_fork_child(void);

#endif
