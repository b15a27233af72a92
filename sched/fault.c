/*
 * Fault injection (GOSHIM_FAULT): resource failures on demand, to see that
 * goshim survives each one the way the kernel or glibc would let a program
 * survive it. A user who stress-tests a legacy program meets what a single
 * run does not: a stack mapping refused (RLIMIT_AS, vm.max_map_count), an
 * OS thread refused (RLIMIT_NPROC), no epoll instance (RLIMIT_NOFILE), no
 * CPU-time timer or queued signal (RLIMIT_SIGPENDING). Each failure site
 * asks fault_inject(kind) just before the real call and, when told so,
 * takes its failure path with the errno the kernel would have given:
 *
 *   stack     a thread's stack (stack_alloc for a G)   ENOMEM: pthread_create
 *                                                       returns EAGAIN
 *   m         an M's OS thread (newm)                   EAGAIN: the Ms there are
 *                                                       carry the Gs; retried
 *   poller    the epoll instance or its eventfd         EMFILE: I/O waits block
 *                                                       in the kernel, P handed off
 *   timer     an M's CPU-time slice timer               EAGAIN: sysmon times
 *                                                       the slices
 *   sigqueue  rt_tgsigqueueinfo of a preemption request EAGAIN: asked again (sysmon,
 *             or of a signal's bell to a thread's M    the tick); the bell retried
 *
 * The paths are the real ones: an injected failure and a real one print
 * the same message (once per kind; the injected one says so).
 *
 * Grammar: a comma-separated list of KIND:1 (always) or KIND:1/N (one call
 * in N, N >= 1), each kind at most once, and optionally seed:S (a whole
 * number). Nothing else is accepted: "stack:50" might mean 1/50 or 50%,
 * so it is refused with a message naming it, and goshim runs without
 * faults, as with any malformed knob (config.c). Unseeded, the seed is
 * GOSHIM_CHAOS's if set, else the clock's; the start-up line prints it.
 *
 * Draws. Each kind has its own counter, so the calls of one kind do not
 * shift another's draws: the k-th call of a kind fails iff
 * mix(seed, kind, k) % N == 0. With one P and a program that does not
 * depend on time, the same seed fails the same calls again.
 *
 * Cost when off: fault_inject is one load of fault_kinds (written once at
 * start-up, before any M) and one predicted branch.
 */
#include <stdio.h>
#include <string.h>

#include "sched.h"
#include "throw.h"

uint32_t fault_kinds; /* bit per armed kind; set by fault_init, before any M */

static struct {
    struct fault_spec spec;
    uint64_t count[FAULT_NKINDS]; /* atomic: calls drawn for so far */
    uint64_t nfail[FAULT_NKINDS]; /* atomic: failures injected */
    uint32_t said;                /* atomic: bit per kind whose failure was reported */
} flt;

static const char *const kind_names[FAULT_NKINDS] = {"stack", "m", "poller", "timer", "sigqueue"};

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A whole number at *s, to its end or a ','; false if none or too large. */
static bool parse_num(const char **s, uint64_t *out)
{
    const char *p = *s;
    uint64_t v = 0;
    if (*p < '0' || *p > '9')
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *s = p;
    *out = v;
    return true;
}

/* The kind named by the n bytes at s, or -1. */
static int kind_of(const char *s, size_t n)
{
    for (int k = 0; k < FAULT_NKINDS; k++)
        if (strlen(kind_names[k]) == n && !memcmp(s, kind_names[k], n))
            return k;
    return -1;
}

/* One item of the list, s to end: into out; false with why filled. */
static bool parse_item(const char *s, const char *end, struct fault_spec *out, char *why,
                       size_t nwhy)
{
    int len = (int)(end - s);
    const char *colon = memchr(s, ':', (size_t)(end - s));
    if (!colon) {
        snprintf(why, nwhy, "'%.*s' has no ':'", len, s);
        return false;
    }
    const char *p = colon + 1;
    uint64_t v = 0, n = 1;
    if ((size_t)(colon - s) == 4 && !memcmp(s, "seed", 4)) {
        if (!parse_num(&p, &v) || p != end) {
            snprintf(why, nwhy, "'%.*s': a seed is a whole number", len, s);
            return false;
        }
        out->seed = v;
        out->seeded = true;
        return true;
    }
    int k = kind_of(s, (size_t)(colon - s));
    if (k < 0) {
        snprintf(why, nwhy, "'%.*s': no kind '%.*s' (stack, m, poller, timer, sigqueue, seed)", len,
                 s, (int)(colon - s), s);
        return false;
    }
    bool ok = parse_num(&p, &v) && v == 1;
    if (ok && p != end)
        ok = *p++ == '/' && parse_num(&p, &n) && n >= 1 && n <= UINT32_MAX && p == end;
    if (!ok) {
        snprintf(why, nwhy, "'%.*s': the rate is 1 (always) or 1/N (one call in N)", len, s);
        return false;
    }
    if (out->kinds & (1u << k)) {
        snprintf(why, nwhy, "'%.*s': %s is named twice", len, s, kind_names[k]);
        return false;
    }
    out->kinds |= 1u << k;
    out->rate[k] = (uint32_t)n;
    return true;
}

bool fault_parse(const char *s, struct fault_spec *out, char *why, size_t nwhy)
{
    struct fault_spec f;
    memset(&f, 0, sizeof f);
    while (*s) {
        const char *end = strchr(s, ',');
        if (!end)
            end = s + strlen(s);
        if (end == s) {
            snprintf(why, nwhy, "an empty item");
            return false;
        }
        if (!parse_item(s, end, &f, why, nwhy))
            return false;
        s = *end ? end + 1 : end;
    }
    *out = f;
    return true;
}

void fault_init(const struct fault_spec *spec, const uint64_t *chaos_seed)
{
    if (!spec->kinds)
        return;
    flt.spec = *spec;
    if (!spec->seeded)
        flt.spec.seed = chaos_seed ? *chaos_seed : mix((uint64_t)nanotime());
    char list[160];
    size_t off = 0;
    for (int k = 0; k < FAULT_NKINDS && off < sizeof list; k++) {
        if (!(spec->kinds & (1u << k)))
            continue;
        off += (size_t)snprintf(list + off, sizeof list - off, "%s%s:1", off ? "," : "",
                                kind_names[k]);
        if (off < sizeof list && spec->rate[k] > 1)
            off += (size_t)snprintf(list + off, sizeof list - off, "/%u", spec->rate[k]);
    }
    rt_print(2, "goshim: injecting faults %s, seed %lu (GOSHIM_FAULT=%s,seed:%lu draws the same)\n",
             list, (unsigned long)flt.spec.seed, list, (unsigned long)flt.spec.seed);
    __atomic_store_n(&fault_kinds, spec->kinds, __ATOMIC_RELEASE);
}

bool fault_draw(enum fault_kind k)
{
    if (!(fault_kinds & (1u << k)))
        return false;
    uint64_t i = __atomic_fetch_add(&flt.count[k], 1, __ATOMIC_RELAXED);
    uint32_t n = flt.spec.rate[k];
    if (n > 1 && mix(flt.spec.seed ^ mix(((uint64_t)k << 56) + i)) % n != 0)
        return false;
    __atomic_add_fetch(&flt.nfail[k], 1, __ATOMIC_RELAXED);
    return true;
}

bool fault_first(enum fault_kind k)
{
    return !(__atomic_fetch_or(&flt.said, 1u << k, __ATOMIC_RELAXED) & (1u << k));
}

const char *fault_note(bool injected)
{
    return injected ? " [injected by GOSHIM_FAULT]" : "";
}
