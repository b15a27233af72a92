/*
 * prog_preempt_regs: do threads that are interrupted anywhere get every
 * register back?
 *
 *   prog_preempt_regs [SECONDS]      (default 2; a positive integer, at most 60)
 *
 * NTHREADS threads (more than GOSHIM_PROCS=1 or 2) each run a loop that
 * keeps many registers live at once: six 64-bit xorshift states in
 * general-purpose registers, an x87 long double accumulator, and twelve
 * vectors (integer LCGs, float sums of their conversions, double
 * multiply-adds). The vectors are 32-byte AVX registers when the CPU has
 * AVX2 (a function built with target("avx2"), chosen with
 * __builtin_cpu_supports) and pairs of 16-byte SSE registers otherwise; the
 * arithmetic is lane-wise, so both give the same bits. Nothing in the loop
 * calls a function.
 *
 * Each thread checks that it starts with the default floating-point
 * environment (main's when it created the thread) and an empty x87
 * register stack, then sets its own non-default environment:
 * an MXCSR rounding mode (one also with flush-to-zero and
 * denormals-are-zero) and an x87 control word (rounding mode and precision
 * control), different per thread, so that registers or control words
 * leaking from one thread to another change the sums.
 *
 * The work is a fixed number of iterations (about SECONDS seconds per
 * thread on the machine ROUND_ITERS was tuned on) cut into
 * ROUNDS_PER_S * SECONDS rounds. Before
 * any thread starts, main computes every thread's state after each round
 * itself (nothing else runs meanwhile), with that thread's floating-point
 * environment (and checks that both the MXCSR and the x87 control word of
 * each environment change the results). Each thread then checks, after
 * every round, that its MXCSR control bits and x87 control word are still
 * the ones it set and that its state (checksum) is the reference one. main
 * checks at the end that its own environment is still the default. Output:
 *   regs: N threads, R rounds each, all checksums match
 * exit 0; or the first mismatch and exit 1, e.g.
 *   regs: thread T round R: checksum 0x..., want 0x...; differs in: x (x87)
 *   regs: thread T: at start MXCSR control bits ..., x87 tag word ...; want ...
 * (the parts: q integer vectors, f float vectors, d double vectors,
 * s general registers, x x87).
 */
#include <errno.h>
#include <immintrin.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_check.h"

#define NTHREADS     3
#define ROUNDS_PER_S 20
/* Iterations per round: about 1/ROUNDS_PER_S s of the AVX2 loop on the machine it was
 * tuned on; faster or slower machines only run the test shorter or longer. */
#define ROUND_ITERS 13000000L
#define MAX_SECONDS 60

#define NSLOT   4 /* 32-byte slots per kind of vector */
#define NSCALAR 6

struct wstate {
    uint32_t q[NSLOT][8]; /* LCGs, lane-wise */
    float f[NSLOT][8];    /* sums of the LCGs' values as floats */
    double d[NSLOT][4];   /* d = d * (1 + 1e-10) + c[slot] */
    uint64_t s[NSCALAR];  /* xorshift64 */
    long double x;        /* x87: x = x * (1 + 1e-12) + s0 * 2^-63 */
};

/* The floating-point environment of a thread: MXCSR and x87 control word. */
struct fpenv {
    unsigned mxcsr;
    unsigned short cw;
};

/* MXCSR: all exceptions masked (0x1f80) | rounding (bits 13-14) | FTZ (15) + DAZ (6). */
#define MXCSR_DEFAULT 0x1f80u
#define MXCSR_CTRL    0xffc0u /* control bits; 0-5 are the sticky exception flags */
#define MXCSR_DOWN    (1u << 13)
#define MXCSR_UP      (2u << 13)
#define MXCSR_ZERO    (3u << 13)
#define MXCSR_FTZ_DAZ 0x8040u
/* x87 CW: exceptions masked (0x7f with reserved bit 6) | precision (8-9) | rounding (10-11). */
#define CW_DEFAULT 0x037f
#define CW(pc, rc) ((unsigned short)(0x7f | ((pc) << 8) | ((rc) << 10)))

static const struct fpenv envs[NTHREADS] = {
    {MXCSR_DEFAULT | MXCSR_DOWN, CW(3, 2)},                 /* 64-bit precision, round up */
    {MXCSR_DEFAULT | MXCSR_UP, CW(2, 3)},                   /* 53-bit, toward zero */
    {MXCSR_DEFAULT | MXCSR_ZERO | MXCSR_FTZ_DAZ, CW(0, 1)}, /* 24-bit, round down */
};

static unsigned short get_cw(void)
{
    unsigned short cw;
    __asm__ volatile("fnstcw %0" : "=m"(cw));
    return cw;
}

static void set_cw(unsigned short cw)
{
    __asm__ volatile("fldcw %0" : : "m"(cw));
}

/* The x87 tag word: 0xffff when the register stack is empty, as the ABI wants at a call. */
static unsigned short get_x87_tags(void)
{
    unsigned char env[28]; /* fnstenv's 32-bit protected-mode layout: tag word at byte 8 */

    __asm__ volatile("fnstenv %0\n\tfldenv %0" : "=m"(env)); /* fnstenv masks exceptions */
    return (unsigned short)(env[8] | env[9] << 8);
}

static void set_env(const struct fpenv *e)
{
    _mm_setcsr(e->mxcsr);
    set_cw(e->cw);
}

/*
 * The loop, for vectors of VB bytes: NSLOT * 32 / VB vectors of each kind.
 * Every operation is lane-wise, so VB = 16 and VB = 32 compute the same bits.
 * -ffp-contract cannot fuse the multiply-adds: neither target enables FMA.
 */
#define DEFINE_WORK(NAME, ATTR, VB)                                                                \
    ATTR __attribute__((noinline)) static void NAME(struct wstate *w, long n)                      \
    {                                                                                              \
        typedef uint32_t vu __attribute__((vector_size(VB)));                                      \
        typedef int32_t vi __attribute__((vector_size(VB)));                                       \
        typedef float vf __attribute__((vector_size(VB)));                                         \
        typedef double vd __attribute__((vector_size(VB)));                                        \
        enum { NV = NSLOT * 32 / VB };                                                             \
        vu q[NV];                                                                                  \
        vf f[NV];                                                                                  \
        vd d[NV];                                                                                  \
        uint64_t s0 = w->s[0], s1 = w->s[1], s2 = w->s[2], s3 = w->s[3], s4 = w->s[4],             \
                 s5 = w->s[5];                                                                     \
        long double x = w->x;                                                                      \
                                                                                                   \
        memcpy(q, w->q, sizeof q);                                                                 \
        memcpy(f, w->f, sizeof f);                                                                 \
        memcpy(d, w->d, sizeof d);                                                                 \
        for (long i = 0; i < n; i++) {                                                             \
            _Pragma("GCC unroll 16") for (int k = 0; k < NV; k++)                                  \
            {                                                                                      \
                const unsigned slot = (unsigned)k * (VB) / 32; /* the same per 32 bytes */         \
                q[k] = q[k] * 1664525u + (1013904223u + 2u * slot);                                \
                f[k] += __builtin_convertvector((vi)q[k], vf) * 4.6566128e-10f;                    \
                d[k] = d[k] * 1.0000000001 + (0.1 + 0.01 * slot);                                  \
            }                                                                                      \
            s0 ^= s0 << 13, s0 ^= s0 >> 7, s0 ^= s0 << 17;                                         \
            s1 ^= s1 << 13, s1 ^= s1 >> 7, s1 ^= s1 << 17;                                         \
            s2 ^= s2 << 13, s2 ^= s2 >> 7, s2 ^= s2 << 17;                                         \
            s3 += s0 ^ (s1 >> 3);                                                                  \
            s4 = (s4 ^ s2) * 0x9e3779b97f4a7c15ull;                                                \
            s5 += s3 + (s4 >> 29);                                                                 \
            x = x * 1.000000000001L + (long double)(int64_t)s0 * 0x1p-63L;                         \
        }                                                                                          \
        memcpy(w->q, q, sizeof q);                                                                 \
        memcpy(w->f, f, sizeof f);                                                                 \
        memcpy(w->d, d, sizeof d);                                                                 \
        w->s[0] = s0, w->s[1] = s1, w->s[2] = s2, w->s[3] = s3, w->s[4] = s4, w->s[5] = s5;        \
        w->x = x;                                                                                  \
    }

DEFINE_WORK(work_avx2, __attribute__((target("avx2"))), 32)
DEFINE_WORK(work_sse, , 16)

static void (*work)(struct wstate *, long);

/* The starting state of thread t (different seeds per thread). */
static void init_state(struct wstate *w, int t)
{
    uint64_t seed = 0x243f6a8885a308d3ull * (uint64_t)(t + 1);

    memset(w, 0, sizeof *w);
    for (int k = 0; k < NSLOT; k++) {
        for (int l = 0; l < 8; l++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            w->q[k][l] = (uint32_t)(seed >> 32);
            w->f[k][l] = (float)(l - k) * 0.25f;
        }
        for (int l = 0; l < 4; l++)
            w->d[k][l] = (double)(k * 4 + l) / 3.0;
    }
    for (int j = 0; j < NSCALAR; j++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        w->s[j] = seed | 1;
    }
    w->x = 1.0L / 3.0L;
}

/* FNV-1a over every value (the long double's 10 significant bytes, not its padding). */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t checksum(const struct wstate *w)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, w->q, sizeof w->q);
    h = fnv(h, w->f, sizeof w->f);
    h = fnv(h, w->d, sizeof w->d);
    h = fnv(h, w->s, sizeof w->s);
    return fnv(h, &w->x, 10);
}

/*
 * Which parts of a differ from b, as " q (integer vectors) f ...", comparing
 * the long double's 10 significant bytes, not its padding; "" if none.
 */
static const char *differs(const struct wstate *a, const struct wstate *b, char *buf)
{
    buf[0] = '\0';
    if (memcmp(a->q, b->q, sizeof a->q))
        strcat(buf, " q (integer vectors)");
    if (memcmp(a->f, b->f, sizeof a->f))
        strcat(buf, " f (float vectors)");
    if (memcmp(a->d, b->d, sizeof a->d))
        strcat(buf, " d (double vectors)");
    if (memcmp(a->s, b->s, sizeof a->s))
        strcat(buf, " s (general registers)");
    if (memcmp(&a->x, &b->x, 10))
        strcat(buf, " x (x87)");
    return buf;
}

static long rounds;
static struct wstate *ref[NTHREADS]; /* ref[t][r]: thread t's state after round r */
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;

/* Report the first mismatch of any thread ("... want ...", round r or -1) and exit 1. */
static void mismatch(int t, long r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
static void mismatch(int t, long r, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&report_lock);
    if (r < 0)
        printf("regs: thread %d: ", t);
    else
        printf("regs: thread %d round %ld: ", t, r);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    exit(1);
}

static void *thread_fn(void *arg)
{
    int t = (int)(intptr_t)arg;
    const struct fpenv *e = &envs[t];
    struct wstate w;

    /* main's environment was the default when it created us, and the x87 stack is empty. */
    unsigned csr0 = _mm_getcsr() & MXCSR_CTRL, tags0 = get_x87_tags();
    unsigned short cw0 = get_cw();
    if (csr0 != MXCSR_DEFAULT || cw0 != CW_DEFAULT || tags0 != 0xffff)
        mismatch(t, -1,
                 "at start MXCSR control bits 0x%x, x87 control word 0x%x, x87 tag word 0x%x; "
                 "want 0x%x, 0x%x, 0xffff",
                 csr0, cw0, tags0, MXCSR_DEFAULT, CW_DEFAULT);
    set_env(e);
    init_state(&w, t);
    for (long r = 0; r < rounds; r++) {
        work(&w, ROUND_ITERS);
        unsigned csr = _mm_getcsr() & MXCSR_CTRL;
        unsigned short cw = get_cw();
        char buf[128];

        if (csr != (e->mxcsr & MXCSR_CTRL))
            mismatch(t, r, "MXCSR control bits 0x%x, want 0x%x", csr, e->mxcsr & MXCSR_CTRL);
        if (cw != e->cw)
            mismatch(t, r, "x87 control word 0x%x, want 0x%x", cw, e->cw);
        if (*differs(&w, &ref[t][r], buf))
            mismatch(t, r, "checksum 0x%016" PRIx64 ", want 0x%016" PRIx64 "; differs in:%s",
                     checksum(&w), checksum(&ref[t][r]), buf);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long seconds = 2;
    pthread_t th[NTHREADS];
    const struct fpenv dflt = {MXCSR_DEFAULT, CW_DEFAULT};

    if (argc > 2) {
        fprintf(stderr, "usage: prog_preempt_regs [SECONDS]\n");
        return 1;
    }
    if (argc == 2) {
        char *end;
        errno = 0;
        seconds = strtol(argv[1], &end, 10);
        if (errno != 0 || *end != '\0' || end == argv[1] || seconds < 1 || seconds > MAX_SECONDS) {
            fprintf(stderr, "prog_preempt_regs: SECONDS must be 1..%d, not '%s'\n", MAX_SECONDS,
                    argv[1]);
            return 1;
        }
    }
    rounds = ROUNDS_PER_S * seconds;
    __builtin_cpu_init();
    work = __builtin_cpu_supports("avx2") ? work_avx2 : work_sse;

    /* The references, before any thread exists, each in its thread's environment. */
    for (int t = 0; t < NTHREADS; t++) {
        struct wstate w;

        CHECK((ref[t] = malloc((size_t)rounds * sizeof *ref[t])) != NULL);
        set_env(&envs[t]);
        init_state(&w, t);
        for (long r = 0; r < rounds; r++) {
            work(&w, ROUND_ITERS);
            ref[t][r] = w;
        }
    }
    /*
     * Both halves of each environment must change the sums (else a leak of
     * one would go unnoticed): one round with the default MXCSR, one with
     * the default x87 control word, must both differ from the reference.
     */
    for (int t = 0; t < NTHREADS; t++) {
        const struct fpenv half[2] = {{MXCSR_DEFAULT, envs[t].cw}, {envs[t].mxcsr, CW_DEFAULT}};

        for (int i = 0; i < 2; i++) {
            struct wstate w;

            set_env(&half[i]);
            init_state(&w, t);
            work(&w, ROUND_ITERS);
            if (checksum(&w) == checksum(&ref[t][0])) {
                fprintf(stderr, "prog_preempt_regs: thread %d's %s does not change its sums\n", t,
                        i == 0 ? "MXCSR" : "x87 control word");
                return 1;
            }
        }
    }
    set_env(&dflt);

    for (int t = 0; t < NTHREADS; t++)
        EXPECT(pthread_create(&th[t], NULL, thread_fn, (void *)(intptr_t)t), 0);
    for (int t = 0; t < NTHREADS; t++)
        EXPECT(pthread_join(th[t], NULL), 0);
    if ((_mm_getcsr() & MXCSR_CTRL) != MXCSR_DEFAULT || get_cw() != CW_DEFAULT) {
        printf("regs: main's MXCSR 0x%x / x87 control word 0x%x, want 0x%x / 0x%x\n",
               _mm_getcsr() & MXCSR_CTRL, get_cw(), MXCSR_DEFAULT, CW_DEFAULT);
        return 1;
    }
    printf("regs: %d threads, %ld rounds each, all checksums match\n", NTHREADS, rounds);
    return 0;
}
