/*
 * Signals to threads, for the rest of shim/: what shim/sigdeliver.c
 * (pthread_kill, delivery on the thread's OS thread of the moment, the
 * bell, process signals routed to a thread) and shim/sigmask.c (a call's
 * own signal mask) offer. The design is in sigdeliver.c's top comment;
 * what the signal files share among themselves is in shim/sigroute.h.
 */
#ifndef GOSHIM_SHIM_SIGDELIVER_H
#define GOSHIM_SHIM_SIGDELIVER_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

struct g;
struct sthread;

/*
 * Raise the signals pthread_kill left pending for the calling thread, on
 * its current OS thread (handlers run before it returns). 0: none was
 * pending; 1: all had handlers with SA_RESTART (or none ran); 2: a
 * handler without SA_RESTART ran, so the interrupted call fails with EINTR.
 */
int shim_deliver_signals(void);
/* Take the lowest signal of want pending for the calling thread (0 if none); info (if not
 * NULL) gets its siginfo. */
int shim_take_signal(uint64_t want, siginfo_t *info);
/* The signals left pending for the calling thread (bit sig-1). */
uint64_t shim_pending_signals(void);

/*
 * Process-directed signals (shim/sigroute.c routes them, sigdeliver.c picks
 * the thread). shim_route_signal delivers sig, with its siginfo, to the thread
 * the kernel would choose (false: none takes it now); run by the router
 * thread. shim_main_takes: the main thread, if it is not self,
 * takes sig now (lock-free, for a signal handler). shim_forwarded_info:
 * the siginfo a signal forwarded to the calling thread came with (taken
 * once). shim_sigwaiting: the signals the calling thread waits for or
 * lets through while it waits (sigwait, sigsuspend; 0 after).
 */
bool shim_route_signal(int sig, const siginfo_t *info);
/* The same on the sending thread itself, where it may be a signal handler: 1 taken, 0 no
 * thread takes it now, -1 a lock it needs was busy (or the first siginfo of the thread
 * would be allocated): nothing done, the router must do it. */
int shim_route_signal_now(int sig, const siginfo_t *info);
/* The same from a handler on an M asleep in stopm (M_ASLEEP), which holds no lock. */
int shim_route_signal_asleep(int sig, const siginfo_t *info);
/*
 * The bell (sigdeliver.c): a signal sent to a thread that runs on an M is queued
 * to that OS thread with this si_code, the G in si_value (si_errno 1: it was
 * sent to the process). shim_bell_take, in the dispatcher or sigwaitinfo on cur, the G
 * that took the bell: out gets the siginfo to run cur's handler with (si_signo 0: nothing
 * for cur); false if the bell was for another G, which the router must look at again
 * (shim_recheck_signal signals its thread again if the signal is still pending there).
 */
#define SHIM_SI_BELL (-0x4753)
/* A signal the router left pending for the process (shim/sigroute.c). */
#define SHIM_SI_PARKED (-0x4754)
bool shim_bell_take(int sig, const siginfo_t *bell, struct g *cur, siginfo_t *out);
void shim_recheck_signal(int sig, const siginfo_t *bell);
/* Routed signals the calling thread has not taken and now blocks: back to the router. */
void shim_give_back_blocked(uint64_t blocked);
/* shim/sigroute.c: hand sig to the router as if it had just been sent to the process. */
void shim_signal_repost(int sig, const siginfo_t *info);
/* The siginfo of a signal the process sends itself: sig, code, our pid and uid. */
static inline void shim_own_info(siginfo_t *si, int sig, int code)
{
    memset(si, 0, sizeof *si);
    si->si_signo = sig;
    si->si_code = code;
    si->si_pid = getpid();
    si->si_uid = getuid();
}
void shim_pend_on_main(int sig, const siginfo_t *info);
bool shim_main_takes(int sig, struct g *self);
bool shim_forwarded_info(int sig, siginfo_t *out);
void shim_sigwaiting(uint64_t set);
/* Signals of the preemption kind the calling thread asked to block: reported, not installed. */
uint64_t shim_hidden_mask(void);
/* A handler of the program runs on the calling thread (the dispatcher), with SA_RESTART or
 * not; how many did, and how many of them without. */
void shim_handler_ran(bool restarts);
uint32_t shim_handlers_ran(void);
uint32_t shim_cutting_handlers_ran(void);
/*
 * A kernel call made with the P handed off (entry: shim.h's HANDOFF_WITH), made again when
 * it fails with EINTR while no handler of the program's ran: goshim's own signals (a
 * preemption request sent before the G went into the call, a bell) or one goshim catches
 * for a program that ignores it (SIGURG) end calls the kernel never restarts (msgrcv,
 * pause, a socket call with SO_RCVTIMEO or SO_SNDTIMEO), which natively nothing would cut
 * short. A timeout of the call's own starts afresh then: at most one more per such signal.
 * Before it is made again the thread's marks are delivered: a bell that cut it short without
 * running the handler (it found the G leaving its M) leaves its mark.
 *
 * A signal marked for the thread that it takes, seen once the G is in its system-call state
 * (on_signal not SHIM_CALL_GOES_ON: calls whose entry may park the G on its way in,
 * entersyscallblock_waiting), is handled there, before the call, and the call then goes as
 * the kernel's goes when a signal is pending as it starts: probe, the call made without
 * waiting, gives its result, or SHIM_WOULD_WAIT; only a call that would wait is cut short,
 * with EINTR for SHIM_CALL_ENDS (pause, msgrcv, msgsnd, semop; also when a handler ran
 * since the wrapper was entered) and for SHIM_CALL_RESTARTS (waitpid, flock) when a
 * handler without SA_RESTART ran. The two sides pair up: a sender marks, then reads the G's
 * state, and rings a G in a system call; the G publishes that state, then reads the marks
 * (each step a locked instruction). pause at P=2 waited for ever when its SIGALRM was
 * marked while the G was parked for an OS thread for its P: not rung there, nor checked
 * after. A bell may also land after that check and before the kernel's entry, in user
 * mode (in glibc's pause, say): its handler ran there and the call, made next, waited for
 * ever (the CI's itimer_interrupts_pause_on_its_way_in). So such a call is made by
 * shim_checked_call, which does not enter the kernel once a handler ran since the
 * decision: the wrapper decides again. What is left is a handler that runs before the
 * wrapper reads shim_handlers_ran: before the call, as natively before its syscall
 * instruction.
 */
enum { SHIM_CALL_GOES_ON, SHIM_CALL_RESTARTS, SHIM_CALL_ENDS };
#define SHIM_WOULD_WAIT LONG_MIN
#define HANDOFF_WITH_NO_GOSHIM_EINTR(ret, entry, on_signal, probe, call)                           \
    ({                                                                                             \
        uint32_t hran_ = shim_handlers_ran();                                                      \
        uint32_t hcut_ = (on_signal) == SHIM_CALL_GOES_ON ? 0 : shim_cutting_handlers_ran();       \
        ret hr_ = 0;                                                                               \
        bool again_;                                                                               \
        do {                                                                                       \
            bool in_ = entry();                                                                    \
            int at_ =                                                                              \
                (on_signal) == SHIM_CALL_GOES_ON ? 0 : shim_signalled_at_start(hran_, hcut_);      \
            long pr_ = at_ ? (long)(probe) : SHIM_WOULD_WAIT, cr_ = 0;                             \
            if (pr_ != SHIM_WOULD_WAIT) {                                                          \
                hr_ = (ret)pr_;                                                                    \
            } else if (at_ == 2 || (at_ && (on_signal) == SHIM_CALL_ENDS)) {                       \
                hr_ = (ret)-1;                                                                     \
                errno = EINTR;                                                                     \
            } else if ((cr_ = (long)(call)) != SCHED_SYSCALL_SIGNALLED) {                          \
                hr_ = (ret)cr_;                                                                    \
            }                                                                                      \
            if (in_)                                                                               \
                exitsyscall();                                                                     \
            again_ = cr_ == SCHED_SYSCALL_SIGNALLED ||                                             \
                     ((long)hr_ == -1 && errno == EINTR &&                                         \
                      (shim_deliver_signals(), shim_handlers_ran() == hran_));                     \
        } while (again_);                                                                          \
        hr_;                                                                                       \
    })
/* The check above, made once the G's system-call state is published; ran, cut: the
 * handlers run when the wrapper was entered (shim_handlers_ran, shim_cutting_handlers_ran).
 * 0: none ran since; 2: one without SA_RESTART did; 1: only others. */
int shim_signalled_at_start(uint32_t ran, uint32_t cut);
/* The call of a wrapper above whose on_signal is not SHIM_CALL_GOES_ON: the raw system
 * call, made only if no handler ran on the thread since shim_signalled_at_start decided
 * (sched_checked_syscall; SCHED_SYSCALL_SIGNALLED: the wrapper decides again); -1 and
 * errno for an error, as glibc's. */
long shim_checked_call(long nr, long a, long b, long c, long d, long e);
void shim_set_hidden_mask(uint64_t set);
/* A wait with a signal mask of its own (ppoll, pselect, epoll_pwait, epoll_pwait2): begin
 * installs the call's mask as the thread's (handling what it lets through), interrupted
 * says whether a handler of the program ran on this thread since, end puts the old mask
 * back (shim/sigmask.c). */
struct shim_callmask {
    uint64_t old, mask, hidden;
    uint32_t ran;
};
void shim_callmask_begin(struct shim_callmask *cm, const sigset_t *mask);
bool shim_callmask_interrupted(const struct shim_callmask *cm);
void shim_callmask_end(struct shim_callmask *cm);
/* Before an exec: what goshim keeps pending for the thread goes to the kernel (returned);
 * after a failed exec, back. */
uint64_t shim_exec_prepare(void);
void shim_exec_failed(uint64_t raised);

/* On thread records (shim/thread.h). The process signals routed to st that it has not taken go back to the process
 * (it exits, or blocks them). */
void sthread_give_back_signals(struct sthread *st, bool exiting);
/* gp's live thread record (sthread_lock held), or NULL. */
struct sthread *sthread_of_g(struct g *gp);
/* tgkill or tkill to st's thread, the calling one or another (then sthread_lock held):
 * delivered as pthread_kill delivers; 0 or an error number. */
int sthread_kill(struct sthread *st, int sig);

#endif
