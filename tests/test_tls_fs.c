/*
 * Tests for sched/tls.c: how tls_init picks the way to write the FS base
 * (wrfsbase, LDT selectors, arch_prctl) and what it says when a forced
 * method is unavailable, the errno mode, and a fresh TCB seen from inside
 * in each method. What TCBs hold over their life (moves, resets, keys,
 * mutex owners, destructors, leaks) is in tests/test_tls.c.
 *
 * Each test calls tls_init itself (Criterion runs every test in its own
 * process). Code that runs with another TCB installed (the *_fn callbacks
 * of tls_call_with_fs) only records what it sees into a struct; all
 * assertions run afterwards on the caller's own TCB.
 */
#include <criterion/criterion.h>

#include "tests/helpers.h"
#include "tests/tls_helpers.h"

#include <cpuid.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Capture fd 2 into a pipe around a call. */
struct capture {
    int saved, rd;
    char buf[1024];
};

static void capture_begin(struct capture *c)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    c->saved = dup(2);
    dup2(p[1], 2);
    close(p[1]);
    c->rd = p[0];
}

static void capture_end(struct capture *c)
{
    dup2(c->saved, 2);
    close(c->saved);
    size_t n = 0;
    ssize_t k;
    while (n < sizeof c->buf - 1 && (k = read(c->rd, c->buf + n, sizeof c->buf - 1 - n)) > 0)
        n += k;
    c->buf[n] = 0;
    close(c->rd);
}

static int count_char(const char *s, char ch)
{
    int n = 0;
    for (; *s; s++)
        n += *s == ch;
    return n;
}

Test(tls, init_full_picks_fs_method, .timeout = 10)
{
    skip_without_full_tls();
    unsigned a, b, c, d;
    int cpu = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & 1);
    int kernel = (getauxval(AT_HWCAP2) & 2) != 0;
    struct capture cap;
    unsetenv("GOSHIM_FS");
    capture_begin(&cap);
    int mode = tls_init(TLS_MODE_FULL, NULL, NULL);
    capture_end(&cap);
    cr_assert_eq(mode, TLS_MODE_FULL, "stderr: %s", cap.buf);
    cr_assert_eq(tls_mode, TLS_MODE_FULL);
    cr_assert_str_empty(cap.buf);
    /* Without wrfsbase, the chain's next method: LDT selectors where the CPU loads them. */
    cr_assert_eq(tls_fs_method,
                 cpu && kernel      ? TLS_FS_WRFSBASE
                 : host_ldt_works() ? TLS_FS_LDT
                                    : TLS_FS_ARCH_PRCTL,
                 "method %s", tls_fs_method_name(tls_fs_method));
    struct tls_stats st;
    tls_get_stats(&st);
    cr_assert_gt(st.static_size, 2048);
}

Test(tls, env_forces_arch_prctl, .timeout = 10)
{
    skip_without_full_tls();
    struct capture cap;
    setenv("GOSHIM_FS", "arch_prctl", 1);
    init_full();
    cr_assert_eq(tls_fs_method, TLS_FS_ARCH_PRCTL);
    setenv("GOSHIM_FS", "fast-please", 1);
    capture_begin(&cap);
    int mode = tls_init(TLS_MODE_FULL, NULL, NULL);
    capture_end(&cap);
    cr_assert_eq(mode, TLS_MODE_FULL);
    cr_assert(strstr(cap.buf, "goshim: GOSHIM_FS=fast-please not understood"), "%s", cap.buf);
    cr_assert_eq(count_char(cap.buf, '\n'), 1);
}

static void check_fresh_tcb(void);

/* deny_modify_ldt makes modify_ldt fail with err in this process (a seccomp filter, for good). */
static void deny_modify_ldt(int err)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_modify_ldt, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
    cr_assert_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);
    cr_assert_eq(syscall(SYS_modify_ldt, 0, NULL, 0), -1);
    cr_assert_eq(errno, err);
}

/* init_captured runs tls_init(FULL) with stderr captured into cap; asserts full mode. */
static void init_captured(struct capture *cap)
{
    capture_begin(cap);
    int mode = tls_init(TLS_MODE_FULL, NULL, NULL);
    capture_end(cap);
    cr_assert_eq(mode, TLS_MODE_FULL, "stderr: %s", cap->buf);
}

Test(tls, auto_without_fsgsbase_picks_ldt, .timeout = 10)
{
    skip_without_full_tls();
    struct capture cap;
    unsetenv("GOSHIM_FS");
    tls_test_no_fsgsbase = 1;
    init_captured(&cap);
    cr_assert_str_empty(cap.buf);
    /* A CPU that never loads the entries modify_ldt wrote: arch_prctl, silently. */
    cr_assert_eq(tls_fs_method, host_ldt_works() ? TLS_FS_LDT : TLS_FS_ARCH_PRCTL, "method %s",
                 tls_fs_method_name(tls_fs_method));
}

/* auto_refused: modify_ldt fails with err; auto goes on to arch_prctl, silently. */
static void auto_refused(int err)
{
    skip_without_full_tls();
    struct capture cap;
    unsetenv("GOSHIM_FS");
    tls_test_no_fsgsbase = 1;
    deny_modify_ldt(err);
    init_captured(&cap);
    cr_assert_str_empty(cap.buf);
    cr_assert_eq(tls_fs_method, TLS_FS_ARCH_PRCTL, "method %s", tls_fs_method_name(tls_fs_method));
    check_fresh_tcb();
}

Test(tls, auto_falls_back_when_modify_ldt_eperm, .timeout = 10)
{
    auto_refused(EPERM);
}

Test(tls, auto_falls_back_when_modify_ldt_enosys, .timeout = 10)
{
    auto_refused(ENOSYS);
}

Test(tls, forced_ldt_refused_says_so, .timeout = 10)
{
    skip_without_full_tls();
    struct capture cap;
    setenv("GOSHIM_FS", "ldt", 1);
    deny_modify_ldt(EPERM);
    init_captured(&cap);
    cr_assert_eq(tls_fs_method, TLS_FS_ARCH_PRCTL);
    cr_assert(strstr(cap.buf, "goshim: GOSHIM_FS=ldt unavailable: modify_ldt is not permitted"),
              "%s", cap.buf);
    cr_assert_eq(count_char(cap.buf, '\n'), 1, "%s", cap.buf);
}

Test(tls, forced_wrfsbase_unavailable_says_so, .timeout = 10)
{
    skip_without_full_tls();
    struct capture cap;
    setenv("GOSHIM_FS", "wrfsbase", 1);
    tls_test_no_fsgsbase = 1;
    init_captured(&cap);
    /* Where the CPU refuses LDT entries, the forced chain says that too and ends at arch_prctl. */
    bool ldt = host_ldt_works();
    cr_assert_eq(tls_fs_method, ldt ? TLS_FS_LDT : TLS_FS_ARCH_PRCTL);
    cr_assert(strstr(cap.buf, "goshim: GOSHIM_FS=wrfsbase unavailable"), "%s", cap.buf);
    cr_assert_eq(count_char(cap.buf, '\n'), ldt ? 1 : 2, "%s", cap.buf);
}

/* Forced wrfsbase, not there, and ldt refused too: both said, arch_prctl runs. */
Test(tls, forced_wrfsbase_then_ldt_refused_says_both, .timeout = 10)
{
    skip_without_full_tls();
    struct capture cap;
    setenv("GOSHIM_FS", "wrfsbase", 1);
    tls_test_no_fsgsbase = 1;
    deny_modify_ldt(EPERM);
    init_captured(&cap);
    cr_assert_eq(tls_fs_method, TLS_FS_ARCH_PRCTL);
    cr_assert(strstr(cap.buf, "goshim: GOSHIM_FS=wrfsbase unavailable"), "%s", cap.buf);
    cr_assert(strstr(cap.buf, "goshim: LDT selectors unavailable: modify_ldt is not permitted"),
              "%s", cap.buf);
    cr_assert_eq(count_char(cap.buf, '\n'), 2, "%s", cap.buf);
}

Test(tls, env_forces_each_method, .timeout = 10)
{
    skip_without_full_tls();
    unsigned a, b, c, d;
    int fsgsbase =
        __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & 1) && (getauxval(AT_HWCAP2) & 2) != 0;
    static const struct {
        const char *env;
        int method;
    } cases[] = {
        {"arch_prctl", TLS_FS_ARCH_PRCTL}, {"ldt", TLS_FS_LDT}, {"wrfsbase", TLS_FS_WRFSBASE}};
    for (int i = 0; i < 3; i++) {
        if ((cases[i].method == TLS_FS_WRFSBASE && !fsgsbase) ||
            (cases[i].method == TLS_FS_LDT && !host_ldt_works()))
            continue;
        setenv("GOSHIM_FS", cases[i].env, 1);
        struct capture cap;
        init_captured(&cap);
        cr_assert_str_empty(cap.buf, "GOSHIM_FS=%s: %s", cases[i].env, cap.buf);
        cr_assert_eq(tls_fs_method, cases[i].method, "GOSHIM_FS=%s gave %s", cases[i].env,
                     tls_fs_method_name(tls_fs_method));
        cr_assert_str_eq(tls_fs_method_name(tls_fs_method), cases[i].env);
    }
}

/* ldt_seen records the thread pointer and errno's address with a TCB installed. */
struct ldt_seen {
    void *tp;
    int *errp;
};

static void ldt_seen_fn(void *arg)
{
    struct ldt_seen *r = arg;
    r->tp = tls_self();
    r->errp = &errno;
}

Test(tls, ldt_past_the_cap_uses_arch_prctl, .timeout = 10)
{
    skip_without_full_tls();
    if (!host_ldt_works())
        cr_skip_test("this CPU does not load LDT entries");
    enum { CAP = 3, N = 10 };
    setenv("GOSHIM_FS", "ldt", 1);
    setenv("GOSHIM_LDT_ENTRIES", "3", 1);
    init_full();
    cr_assert_eq(tls_fs_method, TLS_FS_LDT);
    struct tls_stats st0, st;
    tls_get_stats(&st0);
    void *t[N];
    for (int i = 0; i < N; i++) {
        t[i] = tls_tcb_new();
        cr_assert_not_null(t[i]);
        /* The first CAP in the low arena (below 4 GiB), the rest wherever glibc puts them. */
        if (i < CAP)
            cr_assert_lt((uintptr_t)t[i], 1ul << 32, "TCB %d at %p", i, t[i]);
    }
    tls_get_stats(&st);
    cr_assert_eq(st.ldt_tcbs - st0.ldt_tcbs, CAP);
    cr_assert_eq(st.ldt_overflow - st0.ldt_overflow, N - CAP);
    /* Every one of them installs right, whichever way. */
    for (int i = 0; i < N; i++) {
        struct ldt_seen r = {NULL, NULL};
        tls_call_with_fs(t[i], ldt_seen_fn, &r);
        cr_assert_eq(r.tp, t[i], "TCB %d: %%fs:0 = %p", i, r.tp);
        cr_assert_eq(r.errp, tls_var_in(t[i], &errno));
    }
    /* A freed low TCB's slot (and LDT entry) goes to the next TCB made. */
    void *low = t[1];
    tls_tcb_destroy(low);
    void *again = tls_tcb_new();
    cr_assert_eq(again, low, "slot not recycled: %p, freed %p", again, low);
    struct ldt_seen r = {NULL, NULL};
    tls_call_with_fs(again, ldt_seen_fn, &r);
    cr_assert_eq(r.tp, again);
    t[1] = again;
    for (int i = 0; i < N; i++)
        tls_tcb_destroy(t[i]);
}

Test(tls, ldt_entries_bad_value_says_so, .timeout = 10)
{
    skip_without_full_tls();
    if (!host_ldt_works())
        cr_skip_test("this CPU does not load LDT entries");
    struct capture cap;
    setenv("GOSHIM_FS", "ldt", 1);
    setenv("GOSHIM_LDT_ENTRIES", "9000", 1);
    init_captured(&cap);
    cr_assert(strstr(cap.buf, "goshim: GOSHIM_LDT_ENTRIES=9000 not understood"), "%s", cap.buf);
    cr_assert_eq(tls_fs_method, TLS_FS_LDT);
}

Test(tls, errno_mode_request, .timeout = 10)
{
    struct capture cap;
    capture_begin(&cap);
    int mode = tls_init(TLS_MODE_ERRNO, NULL, NULL);
    capture_end(&cap);
    cr_assert_eq(mode, TLS_MODE_ERRNO);
    cr_assert_eq(tls_mode, TLS_MODE_ERRNO);
    cr_assert_eq(tls_fs_method, TLS_FS_NONE);
    cr_assert(strncmp(cap.buf, "goshim: GOSHIM_TLS=errno", 24) == 0, "%s", cap.buf);
    cr_assert(strstr(cap.buf, "__thread variables are shared"), "%s", cap.buf);
    cr_assert_eq(count_char(cap.buf, '\n'), 1, "%s", cap.buf);
}

/* check_fresh_tcb: a new TCB, seen from inside, in the method tls_init chose. */
static void check_fresh_tcb(void)
{
    void *t = tls_tcb_new();
    cr_assert_not_null(t);
    /*
     * Run on a CPU other than 0 if there is one: with rseq cpu_id left at 0
     * instead of -2, sched_getcpu() would then give the wrong answer.
     */
    cpu_set_t set;
    CPU_ZERO(&set);
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    for (int cpu = CPU_SETSIZE - 1; cpu > 0; cpu--)
        if (CPU_ISSET(cpu, &set)) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
            break;
        }
    struct inside r;
    memset(&r, 0, sizeof r);
    tls_int = 4321;
    errno = 777;
    run_in(t, inside_fn, &r);
    int err_after = errno;
    cr_assert_eq(err_after, 777, "caller's errno changed to %d", err_after);
    cr_assert_eq(tls_int, 4321);

    cr_assert_eq(r.tp, t);
    cr_assert_eq(r.self, t, "pthread_self() is not the TCB");
    cr_assert_eq(r.err0, 0);
    cr_assert_neq(r.errp, &errno);
    cr_assert_eq(r.errp, tls_var_in(t, &errno));
    cr_assert_eq(r.tint, 1234);
    cr_assert_eq(r.tbss, 0);
    cr_assert_str_eq(r.tstr, "initial");
    cr_assert_eq(r.tintp, tls_var_in(t, &tls_int));
    cr_assert(r.ctype_ok);
    cr_assert_str_eq(r.fmt, "42-x-2.5");
    cr_assert_str_eq(r.serr, "Invalid argument");
    cr_assert_str_eq(r.sunk, "Unknown error 987654");
    cr_assert(r.cpu_ok, "sched_getcpu() disagrees with getcpu");
    cr_assert_neq(r.resp, __res_state());
    cr_assert(r.resp > (struct __res_state *)t && (char *)r.resp < (char *)t + 4096,
              "__res_state() not inside the TCB");
    cr_assert_eq(r.stack_guard, fs_word(0x28));
    cr_assert_eq(r.ptr_guard, fs_word(0x30));
    cr_assert_eq(r.multi, 1);
    cr_assert(r.jumped);
    /* The values written inside stayed inside. */
    cr_assert_eq(*(int *)tls_var_in(t, &errno), 99);
    cr_assert_eq(*(int *)tls_var_in(t, &tls_int), 5);
    tls_tcb_destroy(t);
}

Test(tls, fresh_tcb_from_inside, .timeout = 10)
{
    skip_without_full_tls();
    init_full();
    check_fresh_tcb();
}

Test(tls, fresh_tcb_from_inside_ldt, .timeout = 10)
{
    skip_without_full_tls();
    if (!host_ldt_works())
        cr_skip_test("this CPU does not load LDT entries");
    setenv("GOSHIM_FS", "ldt", 1);
    init_full();
    cr_assert_eq(tls_fs_method, TLS_FS_LDT);
    check_fresh_tcb();
    struct tls_stats st;
    tls_get_stats(&st);
    cr_assert_geq(st.ldt_tcbs, 1, "the TCB did not come from the LDT arena");
    cr_assert_eq(st.ldt_overflow, 0);
}

Test(tls, fresh_tcb_from_inside_arch_prctl, .timeout = 10)
{
    skip_without_full_tls();
    setenv("GOSHIM_FS", "arch_prctl", 1);
    init_full();
    cr_assert_eq(tls_fs_method, TLS_FS_ARCH_PRCTL);
    check_fresh_tcb();
}
