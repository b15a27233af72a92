/*
 * Signals under LD_PRELOAD: per-thread masks that follow a thread between
 * OS threads, the classic sigwait server (the signals blocked everywhere
 * but waited for in one thread; goshim's own threads must never take
 * them), and pthread_kill to a parked and to a spinning thread, whose
 * handlers must run on their targets. tests/progs/prog_signals prints the
 * same natively and under goshim.
 */
#include <criterion/criterion.h>

#include "tests/preload_helpers.h"

#define SIGWAIT_OUT "sigwait got 5 SIGUSR1 then SIGTERM\n"
#define MASK_OUT                                                                                   \
    "a new thread starts with its creator's mask: yes\n"                                           \
    "handled while blocked: 0\n"                                                                   \
    "handled after unblocking: 1, on this thread: yes\n"                                           \
    "main, unblocked, handled it at once: yes\n"
#define ALTSTACK_OUT                                                                               \
    "with sigaltstack: handlers on it: yes\n"                                                      \
    "without: handlers on the thread's stack: yes\n"
#define ALTSTACK_IDLE_OUT                                                                          \
    "SIGUSR1's handler ran on an alternate stack nobody else wrote: every round\n"
#define SUSPEND_OUT                                                                                \
    "sigpending shows it: yes\n"                                                                   \
    "sigsuspend: returned -1 EINTR, handler ran on this thread only then: yes\n"                   \
    "raise: handler ran on the raising thread: yes\n"                                              \
    "abort in a thread: child killed by SIGABRT: yes\n"
#define TARGETS_OUT "parked thread ran its handler: yes\nspinning thread ran its handler: yes\n"

Test(preload_signal, natively, .timeout = 60)
{
    expect_native_prints("prog_signals", "sigwait", SIGWAIT_OUT);
    expect_native_prints("prog_signals", "mask", MASK_OUT);
    expect_native_prints("prog_signals", "altstack", ALTSTACK_OUT);
    expect_native_prints("prog_signals", "suspend", SUSPEND_OUT);
    expect_native_prints("prog_signals", "targets", TARGETS_OUT);
}

/* Repeated: a helper thread of goshim that could take a process signal would now and then. */
Test(preload_signal, sigwait_in_one_thread_blocked_in_all, .timeout = 120)
{
    for (int i = 0; i < 5; i++) {
        expect_prints_at_p1_and_p2("prog_signals", "sigwait", SIGWAIT_OUT, 6);
    }
}

Test(preload_signal, masks_are_per_thread_and_follow_it, .timeout = 60)
{
    expect_prints_at_p1_and_p2("prog_signals", "mask", MASK_OUT, 5);
}

Test(preload_signal, pthread_kill_to_parked_and_running_threads, .timeout = 60)
{
    expect_prints_at_p1_and_p2("prog_signals", "targets", TARGETS_OUT, 3);
}

/* Each thread's sigaltstack follows it: one with and one without share OS threads. */
Test(preload_signal, sigaltstack_is_per_thread, .timeout = 60)
{
    expect_prints_at_p1_and_p2("prog_signals", "altstack", ALTSTACK_OUT, 5);
}

/* goshim issue 27 item 6: an OS thread that a thread with an alternate stack left kept that
 * stack installed while it slept; a process signal there wrote its frame on top of the
 * handler the thread was running on it elsewhere (python3 -m test test_asyncio crashed). */
Test(preload_signal, alternate_stack_is_its_threads_alone, .timeout = 60)
{
    expect_native_prints("prog_sigaltstack_idle", NULL, ALTSTACK_IDLE_OUT);
    expect_preloaded_prints("prog_sigaltstack_idle", NULL, NULL, ALTSTACK_IDLE_OUT, 2);
    expect_preloaded_prints("prog_sigaltstack_idle", NULL, "GOSHIM_PROCS=1", ALTSTACK_IDLE_OUT, 2);
}

/* set*id from a thread: glibc's SIGSETXID round reaches every OS thread, goshim's included,
 * and each clears its own mark (it hung: helper threads blocked the signal, and an M
 * running a thread cleared the thread's mark instead of its own). */
Test(preload_signal, setxid_from_a_thread_reaches_every_os_thread, .timeout = 60)
{
    static char nat[4096];
    int st = run_native("prog_setxid", NULL, NULL, nat, sizeof nat);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "natively: status %d\n%s", st, nat);
    cr_assert(strstr(nat, "setresgid from a thread: every OS thread has the new gid\n") ||
                  strstr(nat, "setgid to the same group: returned\n"),
              "natively: %s", nat);
    expect_prints_at_p1_and_p2("prog_setxid", NULL, nat, 8);
}

/* sigsuspend takes a signal left pending while the thread blocked it; raise and abort. */
Test(preload_signal, sigsuspend_raise_abort, .timeout = 60)
{
    expect_prints_at_p1_and_p2("prog_signals", "suspend", SUSPEND_OUT, 2);
}

/* ---- signals sent to the process (issue 13) ------------------------------------------- */

/* prog: the program that has the mode. */
struct procsig_case {
    const char *mode, *out, *prog;
    bool one_thread; /* the mode makes no thread: started at load (GOSHIM_START=now) */
};

static const struct procsig_case procsig_cases[] = {
    {"sleep", "sleep returned early: yes; handler ran on the main thread: yes\n", "prog_procsig",
     true},
    {"sem", "sem_wait failed with EINTR 10 times of 10; handlers on the main thread: yes\n",
     "prog_procsig", false},
    {"pause", "pause returned -1 EINTR; handler on the main thread: yes\n", "prog_procsig", false},
    {"join", "join returned; handler ran on the main thread: yes\n", "prog_procsig", false},
    {"restart", "SA_RESTART: read returned 1 after the handler ran: yes, on the main thread: yes\n",
     "prog_procsig", true},
    {"eintr", "no SA_RESTART: read returned -1 EINTR; handler on the main thread: yes\n",
     "prog_procsig", true},
    {"onlyone", "handler ran on the only thread that takes it: yes\n", "prog_procsig", false},
    {"sigwait", "sigwaitinfo: SIGUSR2, si_code SI_QUEUE: yes, value 42\n", "prog_procsig", false},
    {"sigchld", "nanosleep returned -1 EINTR, time left: yes; handler on the main thread: yes\n",
     "prog_procsig", false},
    {"execpend", "after exec: SIGUSR1 pending: yes, blocked: yes\n", "prog_procsig", true},
    {"parked", "parked: a signal nobody took at once was handled later: every time\n",
     "prog_procsig", false},
    {"lastthread", "lastthread: handled by the thread before it ended: every time\n",
     "prog_procsig", false},
    {"newm", "newm: handlers ran on threads of the program only: yes\n", "prog_procsig", false},
    {"recycle", "recycle: every thread took its signal and ended\n", "prog_procsig", false},
    {"timer", "timer: every expiration counted: yes; SI_TIMER every time: yes\n", "prog_procsig",
     false},
#define MASKED_OUT(call)                                                                           \
    call ": EINTR after the handler ran on main: pending before: yes, from a child: yes, from a "  \
         "thread while another takes it: yes; blocked again, none pending: yes\n"
    {"ppoll", MASKED_OUT("ppoll"), "prog_procsig_masked", false},
    {"pselect", MASKED_OUT("pselect"), "prog_procsig_masked", false},
    {"epoll_pwait", MASKED_OUT("epoll_pwait"), "prog_procsig_masked", false},
    {"epoll_pwait2", MASKED_OUT("epoll_pwait2"), "prog_procsig_masked", false},
#undef MASKED_OUT
};

Test(preload_signal, process_signals_natively, .timeout = 120)
{
    for (size_t i = 0; i < sizeof procsig_cases / sizeof procsig_cases[0]; i++)
        expect_native_prints(procsig_cases[i].prog, procsig_cases[i].mode, procsig_cases[i].out);
}

static void procsig_under_goshim(const char *mode)
{
    for (size_t i = 0; i < sizeof procsig_cases / sizeof procsig_cases[0]; i++) {
        if (strcmp(procsig_cases[i].mode, mode) != 0)
            continue;
        if (procsig_cases[i].one_thread)
            expect_one_thread_prints_at_p1_and_p2(procsig_cases[i].prog, mode,
                                                  procsig_cases[i].out);
        else
            expect_prints_at_p1_and_p2(procsig_cases[i].prog, mode, procsig_cases[i].out, 1);
        return;
    }
    cr_assert_fail("no case %s", mode);
}

/* A POSIX timer's expirations reach its handler as the kernel counts them, signals or
 * overruns, each with its SI_TIMER siginfo: goshim lost one in eight, and delivered some
 * with a tgkill's siginfo (a timer signal kept while its thread was taking the last one
 * replaced that one's siginfo). */
Test(preload_signal, posix_timer_expirations_all_counted, .timeout = 60)
{
    procsig_under_goshim("timer");
}

/* kill from another process reaches the main thread's sleep: it returned 0 after the full
 * 5 s, the handler having run on another OS thread's scheduler stack. */
Test(preload_signal, process_signal_interrupts_the_main_threads_sleep, .timeout = 60)
{
    procsig_under_goshim("sleep");
}

/* setitimer's SIGALRM while main waits in sem_wait and two threads compute: EINTR 10 of 10
 * (it hung). */
Test(preload_signal, itimer_interrupts_sem_wait_in_main, .timeout = 60)
{
    procsig_under_goshim("sem");
}

/* The same under chaos, which adds preemption requests: one taken at a gate inside sem_wait,
 * after its park (in the signal delivery that says whether a handler ran), ran the handler in
 * the yield's resume hook, and sem_wait parked again: 19 runs in 20 hung. */
Test(preload_signal, itimer_interrupts_sem_wait_in_main_under_chaos, .timeout = 120)
{
    for (int seed = 1; seed <= 4; seed++) {
        char env[64], want[256];
        snprintf(env, sizeof env, "GOSHIM_PROCS=1 GOSHIM_CHAOS=%d", seed);
        snprintf(want, sizeof want,
                 "goshim: chaos mode, seed %d (GOSHIM_CHAOS=%d replays this schedule)\n"
                 "sem_wait failed with EINTR 10 times of 10; handlers on the main thread: yes\n",
                 seed, seed);
        expect_preloaded_prints("prog_procsig", "sem", env, want, 1);
    }
}

Test(preload_signal, itimer_interrupts_pause_in_main, .timeout = 60)
{
    procsig_under_goshim("pause");
}

/* The alarm while main is on its way into pause, flock or syscall(SYS_pause): parked for
 * an OS thread to hand its P to (two threads compute at P=2), it was marked there but not
 * rung, and went into the kernel without a look at its marks: pause waited for ever (4 of
 * 4 runs of this test hung, 0 of 15 after; 3 runs in 100 of the 50 ms case hung). Fresh
 * processes: only a first pause finds no idle OS thread. The raw call took no look until
 * session 32. */
Test(preload_signal, itimer_interrupts_pause_on_its_way_in, .timeout = 60)
{
    static char out[4096];
    struct pp_argv a;
    for (int i = 0; i < 60; i++) {
        static const char *const mode[] = {"pause", "flock", "syspause"};
        static const char *const call[] = {"pause", "flock", "syscall(SYS_pause)"};
        char args[32], want[128];
        snprintf(args, sizeof args, "%s 5000", mode[i % 3]);
        snprintf(want, sizeof want, "%s returned -1 EINTR; handler on the main thread: yes\n",
                 call[i % 3]);
        int st = run_preloaded("prog_procsig", pp_argv(&a, "prog_procsig", args), "GOSHIM_PROCS=2",
                               out, sizeof out);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "run %d: status %d\n%s", i, st, out);
        cr_assert_str_eq(out, want, "run %d (%s)", i, mode[i % 3]);
    }
}

/* SIGINT during pthread_join: the handler runs on the joining main thread (it ran on
 * another). */
Test(preload_signal, sigint_during_join_runs_on_main, .timeout = 60)
{
    procsig_under_goshim("join");
}

/* A read from a pipe restarts after a handler with SA_RESTART, fails with EINTR without. */
Test(preload_signal, sigterm_on_a_pipe_read_restarts_or_fails, .timeout = 60)
{
    procsig_under_goshim("restart");
    procsig_under_goshim("eintr");
}

/* Every thread but one blocks the signal: that one gets it although parked (it hung). */
Test(preload_signal, process_signal_goes_to_the_one_parked_thread_that_takes_it, .timeout = 60)
{
    procsig_under_goshim("onlyone");
}

Test(preload_signal, sigwaitinfo_in_a_worker_gets_a_process_signal, .timeout = 60)
{
    procsig_under_goshim("sigwait");
}

/* A child's SIGCHLD interrupts the main thread's nanosleep (it slept the full 5 s). */
Test(preload_signal, sigchld_interrupts_nanosleep, .timeout = 60)
{
    procsig_under_goshim("sigchld");
}

/* Regressions of issue 13: a kill() that no thread took at once was lost for good (the
 * router, not being the main thread, got EPERM queueing a SI_USER signal back to the
 * process: pthread_kill/8-1 hung at one P); a kill() that only an ending thread would take
 * reached the router after that thread had ended (pthread_cond_timedwait/4-3 hung). */
Test(preload_signal, parked_process_signal_was_lost, .timeout = 120)
{
    procsig_under_goshim("parked");
}

Test(preload_signal, signal_to_an_ending_thread_was_lost, .timeout = 120)
{
    procsig_under_goshim("lastthread");
}

/* A new OS thread inherited its creator's mask and GS base: until it set its own GS, the
 * dispatcher took it for its creator's M and ran a process signal's handler there, on no
 * thread of the program. This mode, 32 threads handing their P off at once under a flood
 * of signals, opens that window most often. */
Test(preload_signal, handler_ran_on_a_starting_os_thread, .timeout = 240)
{
    long runs = test_scale(8);
    for (long i = 0; i < runs; i++)
        procsig_under_goshim("newm");
}

/* ppoll, pselect, epoll_pwait and epoll_pwait2 with a mask that lets SIGUSR1 through, in a
 * main thread that blocks it: the process's SIGUSR1 interrupts the call with its handler on
 * main, also when another thread takes it (the router did not see the call's mask: it chose
 * that thread, and the call ran to its timeout), and the mask is back afterwards. */
Test(preload_signal, masked_waits_take_the_signals_their_mask_lets_through, .timeout = 120)
{
    procsig_under_goshim("ppoll");
    procsig_under_goshim("pselect");
    procsig_under_goshim("epoll_pwait");
    procsig_under_goshim("epoll_pwait2");
}

/* A thread record in a stack block a G kept for its next life was not cleared (the block
 * said its pages were fresh): the last thread's siginfo pointer was freed again
 * (pthread_detach/4-3 aborted with a double free) and its exiting flag kept process signals
 * from the new thread (this mode hung). */
Test(preload_signal, record_in_a_reused_stack_block_was_stale, .timeout = 120)
{
    procsig_under_goshim("recycle");
}

/* A signal a thread sent itself while blocking it is still pending after exec. */
Test(preload_signal, pending_signal_survives_exec, .timeout = 60)
{
    procsig_under_goshim("execpend");
}

/* ---- per-thread facts the conformance suite checks (issue 13, item 5) ------------------- */

#define MASKS_OUT   "SIGKILL blocked: no, SIGSTOP blocked: no, SIGURG blocked: yes\n"
#define PENDING_OUT "creator has SIGUSR1 pending: yes; the new thread: no\n"
#define SEMINTR_OUT "sem_timedwait: -1 EINTR\n"

#define URG_OUT                                                                                    \
    "urg: never pending nor taken while threads compute: yes\n"                                    \
    "urg: raised while blocked: pending yes, handler ran no; sigwait took it: yes; "               \
    "pthread_kill'ed: pending yes; unblocked: handler ran 1 time(s), on this thread: yes; the "    \
    "old set had it: yes\n"
#define SIGQUEUE_OUT "pthread_sigqueue: to a parked thread: yes; to a computing one: yes\n"
#define PSCANCEL_OUT                                                                               \
    "process-shared cond: cancelled in its wait, cleanup with the mutex held: 4 of 4\n"

Test(preload_signal, thread_facts_natively, .timeout = 60)
{
    expect_native_prints("prog_thread_facts", "urg", URG_OUT);
    expect_native_prints("prog_thread_facts", "sigqueue", SIGQUEUE_OUT);
    expect_native_prints("prog_thread_facts", "psharedcancel", PSCANCEL_OUT);
    expect_native_prints("prog_thread_facts", "masks", MASKS_OUT);
    expect_native_prints("prog_thread_facts", "pending", PENDING_OUT);
    expect_native_prints("prog_thread_facts", "semintr", SEMINTR_OUT);
}

/* SIGKILL and SIGSTOP were shown blocked; SIGURG (goshim's preemption signal) unblocked
 * although the program had blocked it. */
Test(preload_signal, sigmask_old_set_is_what_the_program_set, .timeout = 60)
{
    expect_one_thread_prints_at_p1_and_p2("prog_thread_facts", "masks", MASKS_OUT);
}

/* goshim's preemption signal never shows; the program's own SIGURG, blocked, waits pending
 * (sigpending, sigwait) and runs its handler once unblocked (the handler ran at once, and
 * sigwait then waited for ever). */
Test(preload_signal, preemption_signal_is_invisible_and_the_programs_sigurg_its_own, .timeout = 90)
{
    expect_prints_at_p1_and_p2("prog_thread_facts", "urg", URG_OUT, 3);
}

/* pthread_sigqueue to another thread, parked or computing: its handler gets SI_QUEUE and
 * the value (glibc's handed the fake tid to the kernel: ESRCH). */
Test(preload_signal, pthread_sigqueue_reaches_its_thread_with_the_value, .timeout = 60)
{
    expect_prints_at_p1_and_p2("prog_thread_facts", "sigqueue", SIGQUEUE_OUT, 3);
}

/* pthread_cancel of a thread in a wait on a process-shared cond (glibc's): it never took
 * effect (pthread_cond_wait/2-3 and pthread_cond_timedwait/2-6 hung). */
Test(preload_signal, cancel_takes_effect_in_a_process_shared_cond_wait, .timeout = 90)
{
    expect_preloaded_prints("prog_thread_facts", "psharedcancel", "GOSHIM_PROCS=1", PSCANCEL_OUT,
                            5);
    expect_preloaded_prints("prog_thread_facts", "psharedcancel", "GOSHIM_PROCS=2", PSCANCEL_OUT,
                            5);
}

/* The creator's pending SIGUSR1 (raised while blocked) showed up in its new thread, which
 * ran on the same OS thread. */
Test(preload_signal, new_thread_starts_with_nothing_pending, .timeout = 60)
{
    expect_prints_at_p1_and_p2("prog_thread_facts", "pending", PENDING_OUT, 2);
}

/* It timed out after 10 s: the handler ran and the wait went on. */
Test(preload_signal, sem_timedwait_fails_with_eintr, .timeout = 60)
{
    expect_prints_at_p1_and_p2("prog_thread_facts", "semintr", SEMINTR_OUT, 2);
}

/* A signal sigsuspend's mask blocks, sent right before the one that ends the wait, runs
 * after that one's handler, once the wait is over (Open POSIX sigsuspend/1-1): under goshim
 * it ran first in about one round of three, at P=1 and at P=2. */
Test(preload_signal, sigsuspend_keeps_a_blocked_signal_behind_the_one_that_ends_it, .timeout = 120)
{
    const char *want = "sigsuspend order: 40 of 40 rounds ran SIGUSR1's handler first\n";
    expect_native_prints("prog_sigsuspend_order", NULL, want);
    expect_one_thread_prints_at_p1_and_p2("prog_sigsuspend_order", NULL, want);
}

/* Regression of issue 27, item 3: after eight threads had started 15 children each with
 * posix_spawn (or vfork and exec), a signal without a handler that every thread blocked,
 * sent to the process (by kill of its own, or by a child) while one thread sigwaited for
 * it, did not reach that thread: SIGUSR2 killed the process, SIGWINCH was discarded and
 * the sigwait hung. The hand-offs of the spawning threads had made Ms that then idled with the mask of
 * the last thread they ran, and the kernel chose one. */
Test(preload_signal, blocked_default_signal_missed_its_sigwait_after_spawns, .timeout = 300)
{
    static const char *const modes[] = {"spawn", "vfork", "spawn child", "vfork child"};
    long runs = test_scale(2);
    for (int winch = 0; winch < 2; winch++) {
        const char *want = winch ? "sigwait got SIGWINCH\n" : "sigwait got SIGUSR2\n";
        for (int m = 0; m < 4; m++) {
            char args[64];
            snprintf(args, sizeof args, "%s%s", modes[m], winch ? " winch" : "");
            expect_native_prints("prog_spawn_sigwait", args, want);
            for (long i = 0; i < runs; i++) {
                expect_preloaded_prints("prog_spawn_sigwait", args, NULL, want, 10);
                expect_preloaded_prints("prog_spawn_sigwait", args, "GOSHIM_PROCS=1", want, 10);
            }
        }
    }
}

/* SIGWINCH and SIGCHLD at their default action, blocked by workers and let through by main,
 * never end main's sigwaitinfo: with idle OS threads blocking them (issue 27), the process's
 * first one could block them while main waited on another, and the kernel, which drops an
 * ignored signal only when the first thread lets it through, woke the wait with EINTR for
 * each. */
Test(preload_signal, ignored_default_signals_never_cut_a_sigwaitinfo_short, .timeout = 120)
{
    const char *want = "sigwaitinfo got SIGUSR1, cut short 0 times\n";
    expect_native_prints("prog_ignored_signals", NULL, want);
    long runs = test_scale(6);
    for (long i = 0; i < runs; i++)
        expect_preloaded_prints("prog_ignored_signals", NULL, NULL, want, 9);
    expect_preloaded_prints("prog_ignored_signals", NULL, "GOSHIM_PROCS=1", want, 9);
}

/* CPython's test_signal StressTest in C: the main thread's SA_ONSTACK handlers on its
 * alternate stack re-arm a 1-11 us ITIMER_REAL while it sleeps 10 us at a time and moves
 * between OS threads. The alternate stack stayed installed on an OS thread the main thread
 * had left; a signal taken there overlapped the main thread's handler frames on it: a
 * crash. */
Test(preload_signal, alternate_stack_is_installed_only_where_its_thread_runs, .timeout = 240)
{
    const char *want = "every SIGALRM counted, every handler on the alternate stack: yes\n";
    expect_native_prints("prog_sigaltstack_timers", NULL, want);
    for (int i = 0; i < 2; i++) {
        expect_preloaded_prints("prog_sigaltstack_timers", NULL, NULL, want, 2);
        expect_preloaded_prints("prog_sigaltstack_timers", NULL, "GOSHIM_PROCS=1", want, 2);
    }
}

/* SIGALRM's handler set back to SIG_DFL after the handler took every SIGALRM: a wake-up
 * goshim had queued for one on an OS thread (idle, so blocking the signal) came through
 * later as the default action, "Alarm clock" (as in CPython's test_signal StressTest). A
 * SIGTERM pending when its handler goes back to SIG_DFL still ends the process once
 * unblocked. */
Test(preload_signal, default_action_back_leaves_no_late_signal, .timeout = 240)
{
    const char *rounds = "SIGALRM back to SIG_DFL after each of 50 cycles: no late signal\n";
    const char *pending =
        "pending SIGTERM, handler back to SIG_DFL, unblocked: killed by SIGTERM: yes\n";
    expect_native_prints("prog_sigdfl_after_handler", "rounds", rounds);
    expect_native_prints("prog_sigdfl_after_handler", "pending", pending);
    for (int i = 0; i < 2; i++) {
        expect_preloaded_prints("prog_sigdfl_after_handler", "rounds", NULL, rounds, 5);
        expect_preloaded_prints("prog_sigdfl_after_handler", "rounds", "GOSHIM_PROCS=1", rounds, 5);
    }
    expect_one_thread_prints_at_p1_and_p2("prog_sigdfl_after_handler", "pending", pending);
}

/* pidfd_send_signal to the own process from the main thread: the handler has run when the
 * call returns, as for kill() (CPython's test_pidfd_send_signal). The kernel left it to the
 * router when the main thread had moved off the first OS thread: late in half the calls at
 * one P, in some runs of two in three at the default P. */
Test(preload_signal, pidfd_send_signal_to_self_is_handled_before_it_returns, .timeout = 120)
{
    const char *want = "handler ran before the call returned: 900 of 900\n";
    expect_native_prints("prog_pidfd_self", NULL, want);
    expect_preloaded_prints("prog_pidfd_self", NULL, "GOSHIM_PROCS=1", want, 2);
    for (int i = 0; i < 3; i++)
        expect_preloaded_prints("prog_pidfd_self", NULL, NULL, want, 2);
}

/* SIGINT and SIGTERM blocked and pending across an exec, then set to SIG_IGN and unblocked by
 * the new image (CPython's resource tracker): discarded. The router took such a signal as
 * soon as start-up routed it, before goshim counted as started, and the dispatcher performed
 * the default action there. */
Test(preload_signal, signals_pending_across_exec_then_ignored_are_discarded, .timeout = 120)
{
    const char *want = "children that ignored the pending signals: 40 of 40\n";
    expect_native_prints("prog_exec_pending", NULL, want);
    expect_one_thread_prints_at_p1_and_p2("prog_exec_pending", NULL, want);
}

/* The helpers GOSHIM_STATS counts (sched/helpers.c) in prog args under env (NULL: none); the
 * program must print want. */
static long helpers_in(const char *prog, const char *args, const char *env, const char *want)
{
    static char out[1 << 16];
    char penv[256];
    run_preloaded_ok(prog, args, env, penv, sizeof penv, out, sizeof out);
    const char *h = strstr(out, "helpers=");
    cr_assert(h, "%s %s (%s): no helpers= in the stats:\n%s", prog, args, penv, out);
    long n = atol(h + 8);
    strip_stats(out);
    cr_assert_str_eq(out, want, "%s %s under goshim (%s) printed:\n%s", prog, args, penv, out);
    return n;
}

/* The signal router and the waker serve routed signals only (a handler, a blocked default):
 * a threaded program that routes none never gets them, two threads and about 0.3 ms less
 * at its start; one that installs its first handler once threads run gets them then, and
 * its signals arrive as natively: the kill to itself handled before kill returns, a
 * handler's sem_post waking a thread, a timer's signal; and in a fork child that installs
 * one while it has one thread. */
Test(preload_signal, signal_helpers_wait_for_the_first_handler, .timeout = 120)
{
    const char *none = "none: 4 threads joined\n";
    const char *late =
        "late: handler before kill returned: yes, waiter woken: yes, timer signal: yes\n";
    const char *child = "child: handler ran: yes\n";
    expect_native_prints("prog_late_handler", "none", none);
    expect_native_prints("prog_late_handler", "late", late);
    expect_native_prints("prog_late_handler", "child", child);
    for (int p = 1; p <= 2; p++) {
        const char *env = p == 1 ? "GOSHIM_PROCS=1" : "GOSHIM_PROCS=2";
        long without = helpers_in("prog_late_handler", "none", env, none);
        long with = helpers_in("prog_late_handler", "late", env, late);
        cr_assert_eq(with, without + 2, "P=%d: %ld helper threads without a handler, %ld with one",
                     p, without, with);
        expect_preloaded_prints("prog_late_handler", "child", env, child, 1);
    }
}
