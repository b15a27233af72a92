/*
 * The raw price of moving the FS base, without goshim: what one
 * arch_prctl(ARCH_SET_FS) costs, what loading an LDT selector into %fs
 * costs, and, for scale, one trivial system call and one modify_ldt
 * write. scripts/bench_fs.sh runs it first; on a host without FSGSBASE
 * (issue 15) these two figures decide whether the ldt method can beat
 * native threads at all; on a host with FSGSBASE it also times wrfsbase.
 *
 * How each figure is taken. Every timed loop is one asm block: while %fs
 * holds a foreign base nothing may touch TLS, and compiled C might (the
 * stack protector's canary is at %fs:0x28), so the block itself puts the
 * thread's own base back before it ends, with a raw arch_prctl. The
 * selector loop alternates two LDT entries with different bases and
 * reads through %fs after each load, so every load changes the base and
 * is used, as a switch is; one loop iteration is two loads. The one
 * arch_prctl that restores the base is spread over the loop and counted
 * in. Each figure is the median of RUNS repetitions, each one clock_gettime
 * interval over N operations.
 *
 * Output: one line,
 *   fs_cost: hwcap2=0x.. fsgsbase=0|1 syscall_ns=.. arch_prctl_ns=..
 *            ldt_load_ns=.. [wrfsbase_ns=..] modify_ldt_us=..
 * and exit status 0 (ldt_load_ns=n/a where the CPU refuses the selectors);
 * a failed modify_ldt or a selector that did not take the base it was given
 * is reported and exits 1.
 */
#include <asm/ldt.h>
#include <asm/prctl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RUNS 9

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static unsigned long fs_base(void)
{
    unsigned long base = 0;
    syscall(SYS_arch_prctl, ARCH_GET_FS, &base);
    return base;
}

/* n trivial system calls (getppid), as one asm loop. */
static void syscalls(long n)
{
    long rax;
    asm volatile("1:\n\t"
                 "mov %[nr], %%eax\n\t"
                 "syscall\n\t"
                 "dec %[n]\n\t"
                 "jnz 1b"
                 : [n] "+r"(n), "=&a"(rax)
                 : [nr] "i"(SYS_getppid)
                 : "rcx", "r11", "memory");
}

/* n arch_prctl(ARCH_SET_FS, base) with the thread's own base. */
static void set_fs_loop(long n, unsigned long base)
{
    long rax;
    asm volatile("1:\n\t"
                 "mov %[nr], %%eax\n\t"
                 "mov %[code], %%edi\n\t"
                 "mov %[base], %%rsi\n\t"
                 "syscall\n\t"
                 "dec %[n]\n\t"
                 "jnz 1b"
                 : [n] "+r"(n), "=&a"(rax)
                 : [nr] "i"(SYS_arch_prctl), [code] "i"(ARCH_SET_FS), [base] "r"(base)
                 : "rcx", "r11", "rdi", "rsi", "memory");
}

/*
 * n iterations of: load selector a, read %fs:0, load selector b, read
 * %fs:0; then %fs = 0 and the own base back by arch_prctl. *sum gets the
 * words read, so a wrong base shows.
 */
static void ldt_loop(long n, unsigned a, unsigned b, unsigned long base, unsigned long *sum)
{
    unsigned long acc = 0;
    long rax;
    asm volatile("1:\n\t"
                 "mov %w[a], %%fs\n\t"
                 "add %%fs:0, %[acc]\n\t"
                 "mov %w[b], %%fs\n\t"
                 "add %%fs:0, %[acc]\n\t"
                 "dec %[n]\n\t"
                 "jnz 1b\n\t"
                 "xor %%eax, %%eax\n\t"
                 "mov %%eax, %%fs\n\t"
                 "mov %[nr], %%eax\n\t"
                 "mov %[code], %%edi\n\t"
                 "mov %[base], %%rsi\n\t"
                 "syscall"
                 : [n] "+r"(n), [acc] "+r"(acc), "=&a"(rax)
                 : [a] "r"(a), [b] "r"(b), [nr] "i"(SYS_arch_prctl), [code] "i"(ARCH_SET_FS),
                   [base] "r"(base)
                 : "rcx", "r11", "rdi", "rsi", "memory");
    *sum = acc;
}

/* n iterations of two wrfsbase (bases x and y) and a read through %fs each. */
static void wrfsbase_loop(long n, unsigned long x, unsigned long y, unsigned long base,
                          unsigned long *sum)
{
    unsigned long acc = 0;
    asm volatile("1:\n\t"
                 "wrfsbase %[x]\n\t"
                 "add %%fs:0, %[acc]\n\t"
                 "wrfsbase %[y]\n\t"
                 "add %%fs:0, %[acc]\n\t"
                 "dec %[n]\n\t"
                 "jnz 1b\n\t"
                 "wrfsbase %[base]"
                 : [n] "+r"(n), [acc] "+r"(acc)
                 : [x] "r"(x), [y] "r"(y), [base] "r"(base)
                 : "memory");
    *sum = acc;
}

/* Whether the CPU takes sel as a user data segment (lar sets ZF only then). */
static bool selector_usable(unsigned sel)
{
    unsigned char ok;
    unsigned rights;
    asm volatile("lar %2, %1\n\tsetz %0" : "=q"(ok), "=r"(rights) : "r"(sel) : "cc");
    return ok != 0;
}

static int write_ldt(unsigned entry, unsigned long base)
{
    struct user_desc d;
    memset(&d, 0, sizeof d);
    d.entry_number = entry;
    d.base_addr = (unsigned)base;
    d.limit = 0xfffff;
    d.seg_32bit = 1;
    d.limit_in_pages = 1;
    d.useable = 1;
    return (int)syscall(SYS_modify_ldt, 1, &d, sizeof d);
}

/* ns a selector load into %fs (entries 1 and 2 written), 0 where the CPU refuses the
 * selectors, -1 (said) where a read through one gave the wrong word. */
static double time_selectors(long nldt, unsigned long base, double prctl_ns)
{
    unsigned sel_a = (1 << 3) | 4 | 3, sel_b = (2 << 3) | 4 | 3;
    unsigned long sum;
    double v[RUNS];
    /* Some virtual machines accept modify_ldt but never load the process's LDT: lar then
     * refuses the selector, and a mov of it to %fs would raise #GP (sched/ldt.c). */
    if (!selector_usable(sel_a) || !selector_usable(sel_b)) {
        fprintf(stderr, "fs_cost: the CPU refuses the LDT entries modify_ldt wrote (a virtual "
                        "machine that does not load the process's LDT): no ldt figure\n");
        return 0;
    }
    for (int r = 0; r < RUNS; r++) {
        double t = now_ns();
        ldt_loop(nldt, sel_a, sel_b, base, &sum);
        v[r] = (now_ns() - t - prctl_ns) / (2.0 * nldt);
        if (sum != 1001UL * nldt) {
            fprintf(stderr, "fs_cost: reads through the LDT selectors summed %lu, not %lu\n", sum,
                    1001UL * nldt);
            return -1;
        }
    }
    return median(v, RUNS);
}

int main(void)
{
    unsigned long hwcap2 = getauxval(AT_HWCAP2);
    int fsgsbase = (hwcap2 & 2) != 0;
    unsigned long base = fs_base();
    double v[RUNS], t;
    const long nsys = 200000, nldt = 2000000;

    for (int r = 0; r < RUNS; r++) {
        t = now_ns();
        syscalls(nsys);
        v[r] = (now_ns() - t) / nsys;
    }
    double sys_ns = median(v, RUNS);

    for (int r = 0; r < RUNS; r++) {
        t = now_ns();
        set_fs_loop(nsys, base);
        v[r] = (now_ns() - t) / nsys;
    }
    double prctl_ns = median(v, RUNS);

    /* Two low words with known contents, each the base of one LDT entry. */
    unsigned long *low =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
    if (low == MAP_FAILED) {
        fprintf(stderr, "fs_cost: mmap(MAP_32BIT): %s\n", strerror(errno));
        return 1;
    }
    low[0] = 1;
    low[8] = 1000;
    double wr_us[RUNS];
    for (int r = 0; r < RUNS; r++) {
        t = now_ns();
        if (write_ldt(1 + r % 2, (unsigned long)&low[8 * (r % 2)]) != 0) {
            fprintf(stderr, "fs_cost: modify_ldt: %s (the ldt method cannot work here)\n",
                    strerror(errno));
            return 1;
        }
        wr_us[r] = (now_ns() - t) / 1e3;
    }
    /* both entries written by now: 1 -> low[0], 2 -> low[8] */
    write_ldt(1, (unsigned long)&low[0]);
    write_ldt(2, (unsigned long)&low[8]);
    double ldt_ns = time_selectors(nldt, base, prctl_ns);
    if (ldt_ns < 0)
        return 1;
    if (ldt_ns == 0) {
        printf("fs_cost: hwcap2=%#lx fsgsbase=%d syscall_ns=%.1f arch_prctl_ns=%.1f "
               "ldt_load_ns=n/a modify_ldt_us=%.1f\n",
               hwcap2, fsgsbase, sys_ns, prctl_ns, median(wr_us, RUNS));
        return 0;
    }
    if (fs_base() != base) {
        fprintf(stderr, "fs_cost: the FS base was not restored\n");
        return 1;
    }

    char wr[64] = "";
    if (fsgsbase) {
        for (int r = 0; r < RUNS; r++) {
            t = now_ns();
            unsigned long sum;
            wrfsbase_loop(nldt, (unsigned long)&low[0], (unsigned long)&low[8], base, &sum);
            v[r] = (now_ns() - t) / (2.0 * nldt);
        }
        snprintf(wr, sizeof wr, " wrfsbase_ns=%.1f", median(v, RUNS));
    }

    printf("fs_cost: hwcap2=%#lx fsgsbase=%d syscall_ns=%.1f arch_prctl_ns=%.1f ldt_load_ns=%.2f%s "
           "modify_ldt_us=%.1f\n",
           hwcap2, fsgsbase, sys_ns, prctl_ns, ldt_ns, wr, median(wr_us, RUNS));
    return 0;
}
