/*
 * prog_preempt_libc: a thread that spends its time inside libc, beside a
 * thread that never makes a call.
 *
 *   prog_preempt_libc [strict]
 *
 * The "libc" thread, in this order:
 *   qsort    sorts NSORT ints with a comparator that sets the global flag
 *            inside_cmp on entry and clears it before returning (and does a
 *            little arithmetic in between, to make that window wide);
 *   memcpy   copies a 32 MiB buffer REPS times (aligned and unaligned),
 *            checking the copy each time;
 *   printf   formats NLINES lines with snprintf and write()s them to pipe A,
 *            and every fourth line also with fprintf into an open_memstream
 *            stream, whose new text it write()s to pipe B after every 64
 *            lines; then closes both pipes. (Not fprintf on a FILE of the
 *            pipe itself: stdio's own write() is a call goshim cannot see,
 *            a different matter from preemption.)
 * Two reader threads read pipes A and B to EOF and check that every line is
 * the one expected, in order. A "spinner" thread spins (no calls) until the
 * libc thread is done, so that with one CPU the scheduler has reason to
 * preempt whichever runs (GOSHIM_PROCS=1: goshim preempts the spinner, and
 * must refuse to preempt the libc thread while it is inside libc or has
 * libc frames on its stack, as in the comparator called by qsort).
 *
 * strict: the program's threads never run at the same time (GOSHIM_PROCS=1
 * under goshim; not natively, where they do). Then the spinner must never
 * see inside_cmp set: if it does, the libc thread was switched out inside
 * the comparator, i.e. preempted with qsort's frames on its stack.
 *
 * Output: "libc: ok", exit 0; otherwise what went wrong, exit 1.
 * NSORT 2,000,000, REPS 16 and NLINES 100,000 (seconds of work natively)
 * are scaled by GOSHIM_TEST_SCALE.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prog_check.h"

#define BUF_BYTES  (32L << 20)
#define NLINES_MAX 1000000L
#define B_EVERY    4  /* every fourth line also goes to pipe B */
#define B_FLUSH    64 /* lines of pipe B per write() */

static long nsort, reps, nlines;
static int strict;

static int inside_cmp;       /* 1 while the comparator runs */
static int libc_done;        /* the libc thread has finished */
static long spinner_saw_cmp; /* spinner iterations that found inside_cmp set */
static uint64_t cmp_sink;
static int pipe_a[2], pipe_b[2];

static void die(const char *what)
{
    printf("libc: %s\n", what);
    fflush(stdout);
    exit(1);
}

/* ---- qsort ---------------------------------------------------------------------- */

static int cmp_int(const void *a, const void *b)
{
    __atomic_store_n(&inside_cmp, 1, __ATOMIC_RELAXED);
    int x = *(const int *)a, y = *(const int *)b;
    /* A little work inside the window (not optimized away: it feeds cmp_sink). */
    uint64_t h = (uint64_t)(unsigned)x * 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 8; i++)
        h ^= (h >> 29) * 0xbf58476d1ce4e5b9ull;
    cmp_sink += h;
    int r = (x > y) - (x < y);
    __atomic_store_n(&inside_cmp, 0, __ATOMIC_RELAXED);
    return r;
}

static void phase_qsort(void)
{
    int *a = malloc((size_t)nsort * sizeof *a);
    uint64_t x = 88172645463325252ull, sum = 0, sum2 = 0;

    if (a == NULL)
        die("out of memory (qsort array)");
    for (long i = 0; i < nsort; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        a[i] = (int)(x >> 33) - (1 << 30);
        sum += (uint64_t)(int64_t)a[i];
    }
    qsort(a, (size_t)nsort, sizeof *a, cmp_int);
    for (long i = 0; i < nsort; i++) {
        if (i > 0 && a[i - 1] > a[i])
            die("qsort: the array is not sorted");
        sum2 += (uint64_t)(int64_t)a[i];
    }
    if (sum2 != sum)
        die("qsort: the sorted array holds other values");
    free(a);
}

/* ---- memcpy ------------------------------------------------------------------- */

static void phase_memcpy(void)
{
    uint64_t *src = malloc(BUF_BYTES), *dst = malloc(BUF_BYTES + 64);
    size_t words = BUF_BYTES / sizeof(uint64_t);

    if (src == NULL || dst == NULL)
        die("out of memory (memcpy buffers)");
    for (long r = 0; r < reps; r++) {
        uint64_t k = 0x9e3779b97f4a7c15ull * (uint64_t)(r + 1);

        for (size_t i = 0; i < words; i++)
            src[i] = i * k ^ (uint64_t)r;
        if (r % 2 == 0) {
            memcpy(dst, src, BUF_BYTES);
            for (size_t i = 0; i < words; i++) {
                if (dst[i] != (i * k ^ (uint64_t)r))
                    die("memcpy: the copy differs (aligned)");
            }
        } else {
            /* Unaligned destination and source, odd length. */
            size_t off = 1 + (size_t)r % 7, len = BUF_BYTES - 13;
            memcpy((char *)dst + off, (char *)src + 3, len);
            if (memcmp((char *)dst + off, (char *)src + 3, len) != 0)
                die("memcpy: the copy differs (unaligned)");
        }
    }
    free(src);
    free(dst);
}

/* ---- lines through pipes ----------------------------------------------------------- */

/* Line i of pipe kind ('A' or 'B'): LINE_FMT with the arguments LINE_ARGS (see line_word). */
#define LINE_FMT "%c %07ld %.9f %-12s %08" PRIx64 " %e\n"
#define LINE_ARGS(kind, i, word, h)                                                                \
    (kind), (i), (double)(i) / 7.0, (word), (h), (double)(i)*1e-3 + 0.5

/* The pseudo-random word of line i of pipe kind into word (>= 41 bytes); the hash for %08x. */
static uint64_t line_word(char kind, long i, char *word)
{
    static const char letters[] = "abcdefghijklmnopqrstuvwxyz";
    uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15ull + (uint64_t)kind;
    int wl = 1 + (int)(h % 40);

    for (int j = 0; j < wl; j++) {
        h ^= h >> 31, h *= 0xbf58476d1ce4e5b9ull;
        word[j] = letters[h % 26];
    }
    word[wl] = '\0';
    return h & 0xffffffffu;
}

/* Line i of pipe kind in buf (NUL-terminated, with its newline); its length. */
static int make_line(char *buf, size_t len, char kind, long i)
{
    char word[48];
    uint64_t h = line_word(kind, i, word);

    return snprintf(buf, len, LINE_FMT, LINE_ARGS(kind, i, word, h));
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write to a pipe failed");
        p += w;
        n -= (size_t)w;
    }
}

static void phase_print(void)
{
    char line[256], *mbuf = NULL;
    size_t msize = 0, sent = 0;
    FILE *mb = open_memstream(&mbuf, &msize);
    long nb = 0;

    if (mb == NULL)
        die("open_memstream failed");
    for (long i = 0; i < nlines; i++) {
        int n = make_line(line, sizeof line, 'A', i);
        write_all(pipe_a[1], line, (size_t)n);
        if (i % B_EVERY == 0) {
            /* Formatted by stdio's fprintf into its buffer. */
            char word[48];
            uint64_t h = line_word('B', nb, word);
            if (fprintf(mb, LINE_FMT, LINE_ARGS('B', nb, word, h)) < 0)
                die("fprintf to the memory stream failed");
            if (++nb % B_FLUSH == 0 || i + B_EVERY >= nlines) {
                if (fflush(mb) != 0)
                    die("fflush of the memory stream failed");
                write_all(pipe_b[1], mbuf + sent, msize - sent);
                sent = msize;
            }
        }
    }
    close(pipe_a[1]);
    close(pipe_b[1]);
    fclose(mb);
    free(mbuf);
}

struct reader {
    char kind;
    int fd;
    long want; /* lines expected */
    long got;
    const char *error;
};

static void *reader_fn(void *arg)
{
    struct reader *rd = arg;
    char *buf = malloc(1 << 16), want[256];
    size_t have = 0, size = 1 << 16;

    if (buf == NULL) {
        rd->error = "out of memory";
        return NULL;
    }

    for (;;) {
        ssize_t n = read(rd->fd, buf + have, size - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rd->error = "read failed";
            break;
        }
        if (n == 0)
            break;
        have += (size_t)n;
        char *p = buf, *nl;
        while ((nl = memchr(p, '\n', have - (size_t)(p - buf))) != NULL) {
            size_t len = (size_t)(nl - p + 1);
            int wl = make_line(want, sizeof want, rd->kind, rd->got);
            if ((size_t)wl != len || memcmp(p, want, len) != 0) {
                rd->error = "a line differs from the one written";
                goto out;
            }
            rd->got++;
            p = nl + 1;
        }
        have -= (size_t)(p - buf);
        memmove(buf, p, have);
        if (have == size) {
            rd->error = "a line longer than the buffer";
            goto out;
        }
    }
    if (rd->error == NULL && have != 0)
        rd->error = "a partial line at EOF";
    else if (rd->error == NULL && rd->got != rd->want)
        rd->error = "wrong number of lines";
out:
    /* Keep the pipe drained so that the writer never blocks on a reader that gave up. */
    if (rd->error != NULL) {
        while (read(rd->fd, buf, size) > 0)
            ;
    }
    free(buf);
    return NULL;
}

/* ---- the threads ---------------------------------------------------------------------- */

static void *libc_fn(void *arg)
{
    (void)arg;
    phase_qsort();
    phase_memcpy();
    phase_print();
    __atomic_store_n(&libc_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* No calls in the loop. */
static void *spinner_fn(void *arg)
{
    long saw = 0;

    (void)arg;
    while (!__atomic_load_n(&libc_done, __ATOMIC_ACQUIRE))
        saw += __atomic_load_n(&inside_cmp, __ATOMIC_RELAXED);
    spinner_saw_cmp = saw;
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t lt, st, ra, rb;
    struct reader a = {'A', 0, 0, 0, NULL}, b = {'B', 0, 0, 0, NULL};

    if (argc > 2 || (argc == 2 && strcmp(argv[1], "strict") != 0)) {
        fprintf(stderr, "usage: prog_preempt_libc [strict]\n");
        return 1;
    }
    strict = argc == 2;
    nsort = scaled(2000000);
    reps = scaled(16);
    nlines = scaled(100000);
    if (nlines > NLINES_MAX)
        nlines = NLINES_MAX;
    CHECK(pipe2(pipe_a, O_CLOEXEC) == 0);
    CHECK(pipe2(pipe_b, O_CLOEXEC) == 0);
    a.fd = pipe_a[0];
    a.want = nlines;
    b.fd = pipe_b[0];
    b.want = (nlines + B_EVERY - 1) / B_EVERY;

    EXPECT(pthread_create(&ra, NULL, reader_fn, &a), 0);
    EXPECT(pthread_create(&rb, NULL, reader_fn, &b), 0);
    EXPECT(pthread_create(&st, NULL, spinner_fn, NULL), 0);
    EXPECT(pthread_create(&lt, NULL, libc_fn, NULL), 0);
    EXPECT(pthread_join(lt, NULL), 0);
    EXPECT(pthread_join(st, NULL), 0);
    EXPECT(pthread_join(ra, NULL), 0);
    EXPECT(pthread_join(rb, NULL), 0);
    if (a.error != NULL || b.error != NULL) {
        struct reader *r = a.error != NULL ? &a : &b;
        printf("libc: pipe %c, line %ld: %s\n", r->kind, r->got, r->error);
        return 1;
    }
    if (strict && spinner_saw_cmp != 0) {
        printf("libc: the spinner ran while the libc thread was inside the comparator (%ld "
               "iterations): it was switched out with qsort's frames on its stack\n",
               spinner_saw_cmp);
        return 1;
    }
    printf("libc: ok\n");
    return 0;
}
