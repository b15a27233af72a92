/*
 * Per-thread TLS: tls_init, which learns the layout of glibc's TCB and
 * chooses the FS method (tls_impl.h lists the files; the model is in tls.c).
 *
 * Offsets. Nothing is hard-coded except the x86-64 TLS ABI header (self at
 * 0 and 0x10, dtv at 8, multiple_threads 0x18, guards 0x28/0x30, feature_1
 * 0x48), which gcc compiles into every binary. The rest is found at start-up:
 *   - tid, list, specific, dtv, sizeof(struct pthread), link_map.l_tls_offset
 *     from libthread_db's _thread_db_* descriptors ({bits, count, offset});
 *   - specific_1stblock from the calling thread's specific[0];
 *   - robust_head from get_robust_list(0) in a probe pthread;
 *   - stackblock, stackblock_size and the two guard sizes by scanning the
 *     probe pthread (made with a known stack size and the default guard)
 *     for the block that holds its frame, then checked against glibc's
 *     pthread_getattr_np of that thread;
 *   - res from the probe thread's __resp; __resp itself from dlvsym;
 *   - the strerror/strsignal buffers (tls_state_off) by scanning for the
 *     pointers the probe thread got back;
 *   - rseq from the public __rseq_offset;
 *   - libc's TLS block from its link map and PT_TLS, and the malloc words
 *     by diffing that block around free(malloc(24)) run in a fresh TCB.
 * If any lookup or probe fails, full mode is refused and the G's share
 * their M's TLS (errno mode, errno saved at every switch) — never a guess.
 *
 * Rejected alternatives:
 *   - Hard-coded offsets from libc6-dbg: silently wrong on any other build.
 *   - wrfsbase whenever CPUID shows FSGSBASE: with CR4.FSGSBASE off the
 *     kernel does not preserve the value (the base reverts at the next
 *     context switch); AT_HWCAP2 is the kernel's word.
 *
 * The FS method (tls_fs_method), chosen once in tls_init, first that works:
 *   - wrfsbase, when CPUID has FSGSBASE and AT_HWCAP2 says the kernel
 *     enabled it;
 *   - ldt: the Gs' TCBs in a low arena, one LDT entry each, installed by
 *     loading a selector into %fs (ldt.c), when modify_ldt
 *     works; TCBs outside the arena with arch_prctl;
 *   - arch_prctl(ARCH_SET_FS): a system call at every switch.
 * GOSHIM_FS forces one; a forced method that cannot work is said, the
 * chain goes on. A refused modify_ldt (ENOSYS, EPERM) is silent in auto.
 */
#include "libc.h"
#include "tls.h"
#include "tls_impl.h"

#include "ldt.h"
#include "lock.h"
#include "throw.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define HWCAP2_FSGSBASE_BIT (1ul << 1)
#define LIBC_TLS_MAX        4096 /* bigger libc TLS blocks are refused */
#define PROBE_STACK_SIZE    (256 * 1024)

int tls_test_no_fsgsbase;

static char why_buf[160];    /* reason full mode was refused; tls_init runs once */
static int probe_thread_err; /* a probe thread could not be created: its error */

/* ---- Probes ---- */

/* fail records why full mode is refused and returns the message. */
static const char *fail(const char *what, const char *detail)
{
    rt_snprint(why_buf, sizeof why_buf, "%s%s", what, detail);
    return why_buf;
}

static void *priv_sym(const char *name)
{
    return dlvsym(RTLD_DEFAULT, name, "GLIBC_PRIVATE");
}

/*
 * db_field reads a libthread_db descriptor {bits, count, offset} and checks
 * it describes a field of elem_bits-bit elements; returns the element count
 * (0 on failure) and the offset in *off.
 */
static size_t db_field(const char *name, uint32_t elem_bits, size_t *off)
{
    const uint32_t *d = priv_sym(name);
    if (!d || d[0] == 0 || d[1] == 0)
        return 0;
    *off = d[2];
    if (d[1] == 1 && d[0] % elem_bits == 0) /* a scalar or a whole array */
        return d[0] / elem_bits;
    if (d[0] == elem_bits) /* an array described element-wise */
        return d[1];
    return 0;
}

/*
 * fs_request reads GOSHIM_FS: the method the chain starts at
 * (wrfsbase, ldt, arch_prctl) and whether the user forced it.
 */
static int fs_request(bool *forced)
{
    static const int chain[] = {TLS_FS_WRFSBASE, TLS_FS_LDT, TLS_FS_ARCH_PRCTL};
    const char *env = getenv("GOSHIM_FS");
    *forced = false;
    if (!env || !*env || strcmp(env, "auto") == 0)
        return TLS_FS_WRFSBASE;
    for (int i = 0; i < 3; i++)
        if (strcmp(env, tls_fs_method_name(chain[i])) == 0) {
            *forced = true;
            return chain[i];
        }
    rt_print(2,
             "goshim: GOSHIM_FS=%s not understood (accepted: auto, wrfsbase, ldt, arch_prctl); "
             "using auto\n",
             env);
    return TLS_FS_WRFSBASE;
}

/* have_wrfsbase: the kernel enabled FSGSBASE (AT_HWCAP2), which it does only on a CPU that
 * has it: no cpuid of our own, which a hypervisor may trap (7-11 us apiece on a PVM guest). */
static bool have_wrfsbase(void)
{
    return (getauxval(AT_HWCAP2) & HWCAP2_FSGSBASE_BIT) != 0 && !tls_test_no_fsgsbase;
}

/* ldt_seen_fn runs with a TCB of the arena installed: what does %fs:0 say? */
static void ldt_seen_fn(void *arg)
{
    *(void **)arg = tls_self();
}

/*
 * start_ldt tries the ldt method (ldt.c): the low arena, the first LDT
 * entries, and a check that loading a selector installs the right TCB.
 * On success tls_fs_method is TLS_FS_LDT. On failure it stays
 * arch_prctl, and the reason is said when the user forced a method
 * (forced: ldt, or wrfsbase, which was not there either), or when a tool
 * (valgrind) or something unusual stands in the way: once, here, at
 * start-up. Where the kernel refuses modify_ldt (ENOSYS: built without
 * it; EPERM: seccomp) or the CPU does not see the entries it wrote
 * (ENOEXEC from ldt_init: a virtual machine that never loads the table)
 * and the user asked for nothing, the chain goes on silently: a message
 * on every start of every program would be output native runs lack.
 */
static void start_ldt(const char *forced)
{
    const char *why = NULL;
    char num[64];
    if (RUNNING_ON_VALGRIND) {
        rt_print(2, "goshim: valgrind does not support LDT selectors in %%fs; threads switch "
                    "with arch_prctl (a system call per switch)\n");
        return;
    }
    int rc =
        ldt_init(tls_info.static_size, tls_info.static_align, tls_info.sizeof_pthread, ldt_cap());
    if (rc == -ENOSYS)
        why = "modify_ldt is not available (a kernel built without CONFIG_MODIFY_LDT_SYSCALL)";
    else if (rc == -EPERM)
        why = "modify_ldt is not permitted (a seccomp filter or a hardened kernel)";
    else if (rc == -ENOMEM)
        why = "no address space below 4 GiB is left for thread control blocks";
    else if (rc == -ENOEXEC)
        why = "the CPU refuses the LDT entries modify_ldt wrote (lar fails: a virtual machine "
              "that does not load the process's LDT)";
    else if (rc != 0)
        why = (rt_snprint(num, sizeof num, "modify_ldt failed with error %d", -rc), num);
    if (!why) {
        tls_fs_method = TLS_FS_LDT;
        void *tcb = ldt_tcb_alloc(), *seen = NULL;
        if (tcb && tls_info.allocate_tls(tcb)) {
            WORD(tcb, TCB_OFF_TCB) = (uintptr_t)tcb; /* %fs:0, all ldt_seen_fn reads */
            tls_call_with_fs(tcb, ldt_seen_fn, &seen);
            tls_info.deallocate_tls(tcb, false);
        }
        if (tcb)
            ldt_tcb_free(tcb);
        if (!tcb || seen != tcb) {
            tls_fs_method = TLS_FS_ARCH_PRCTL;
            ldt_arena_len = 0; /* no TCB is made in the arena from now on */
            why = "loading an LDT selector did not install the thread control block";
        }
    }
    if (why && (forced || (rc != -ENOSYS && rc != -EPERM && rc != -ENOEXEC)))
        rt_print(2,
                 "goshim: %s unavailable: %s; threads switch with arch_prctl (a system call per "
                 "switch)\n",
                 forced && strcmp(forced, "ldt") == 0 ? "GOSHIM_FS=ldt" : "LDT selectors", why);
}

/*
 * init_flag_of finds the flag _dl_allocate_tls passes to
 * _dl_allocate_tls_init for a new thread: its meaning flipped across glibc
 * versions ("copy the images of other namespaces' modules too" in 2.36,
 * "the main thread: do not" from 2.40), and it only shows with modules of
 * other namespaces (dlmopen, LD_AUDIT). _dl_allocate_tls sets %esi right
 * before it jumps there (mov $imm32,%esi or xor %esi,%esi, then jmp or
 * call rel32, as gcc builds it). Returns 0 or 1, or -1 if that shape is
 * not found: then resets take the longer way.
 */
static int init_flag_of(const unsigned char *alloc, const void *init)
{
    int flag = -1;
    for (int i = 0; i < 64; i++) {
        if (alloc[i] == 0xbe) /* mov $imm32, %esi */
            flag = alloc[i + 1] != 0 || alloc[i + 2] || alloc[i + 3] || alloc[i + 4];
        else if (alloc[i] == 0x31 && alloc[i + 1] == 0xf6) /* xor %esi, %esi */
            flag = 0;
        else if ((alloc[i] == 0xe9 || alloc[i] == 0xe8) && flag >= 0) {
            int32_t rel;
            memcpy(&rel, alloc + i + 1, 4);
            if (alloc + i + 5 + rel == (const unsigned char *)init)
                return flag;
        }
    }
    return -1;
}

/* An initialised static TLS variable of ours: _dl_allocate_tls_init copies its image. */
static __thread int reinit_mark __attribute__((tls_model("initial-exec"))) = 0x676f;

/*
 * probe_reinit finds how to reinitialise a used TCB's TLS in place, as
 * glibc's stack cache does (tls_dtv_clear, then _dl_allocate_tls_init
 * with a new thread's flag): a TCB reset then keeps its DTV instead of
 * freeing it and allocating another (two mallocs and two frees per
 * pthread_create). It is tried on a TCB of glibc's own making, and kept
 * only if it brings back reinit_mark's image.
 */
static void probe_reinit(void)
{
    void *(*init)(void *, bool) = (void *(*)(void *, bool))priv_sym("_dl_allocate_tls_init");
    int flag = init ? init_flag_of((const unsigned char *)tls_info.allocate_tls, init) : -1;
    char *t = flag >= 0 ? tls_info.allocate_tls(NULL) : NULL;
    if (!t)
        return;
    ptrdiff_t off = (char *)&reinit_mark - (char *)tls_self();
    *(int *)(t + off) = 0;
    tls_dtv_clear(t);
    init(t, flag);
    if (*(int *)(t + off) == 0x676f && WORD(t, TCB_OFF_DTV) != 0) {
        tls_info.allocate_tls_init = init;
        tls_info.init_flag = flag;
    }
    tls_info.deallocate_tls(t, true);
}

static const char *probe_symbols(void)
{
    static const char *const names[] = {"_dl_allocate_tls", "_dl_deallocate_tls",
                                        "_dl_get_tls_static_info", "__ctype_init"};
    void *p[4];
    for (int i = 0; i < 4; i++)
        if (!(p[i] = priv_sym(names[i])))
            return fail(names[i], " not found");
    tls_info.allocate_tls = (void *(*)(void *))p[0];
    tls_info.deallocate_tls = (void (*)(void *, bool))p[1];
    void (*static_info)(size_t *, size_t *) = (void (*)(size_t *, size_t *))p[2];
    tls_info.ctype_init = (void (*)(void))p[3];
    tls_info.call_tls_dtors = (void (*)(void))priv_sym("__call_tls_dtors");
    if (!tls_info.call_tls_dtors)
        return fail("__call_tls_dtors", " not found");
    static_info(&tls_info.static_size, &tls_info.static_align);
    return NULL;
}

/* State for find_pt_tls: the module to look for, its PT_TLS size found. */
struct phdr_query {
    struct link_map *lm;
    size_t memsz;
};

/* find_pt_tls is a dl_iterate_phdr callback: the PT_TLS memsz of the module q->lm. */
static int find_pt_tls(struct dl_phdr_info *pi, size_t size, void *arg)
{
    struct phdr_query *q = arg;
    (void)size;
    if (pi->dlpi_addr != q->lm->l_addr || !pi->dlpi_name ||
        strcmp(pi->dlpi_name, q->lm->l_name) != 0)
        return 0;
    for (int i = 0; i < pi->dlpi_phnum; i++)
        if (pi->dlpi_phdr[i].p_type == PT_TLS)
            q->memsz = pi->dlpi_phdr[i].p_memsz;
    return 1;
}

/* probe_layout reads the descriptors and checks them on the calling thread. */
static const char *probe_layout(void)
{
    char *tp = tls_self();
    const uint32_t *sz = priv_sym("_thread_db_sizeof_pthread");
    if (!sz)
        return fail("_thread_db_sizeof_pthread", " not found");
    tls_info.sizeof_pthread = *sz;
    if (tls_info.sizeof_pthread < 0x300 || tls_info.sizeof_pthread > 0x10000 ||
        tls_info.static_size <= tls_info.sizeof_pthread)
        return fail("implausible sizeof(struct pthread)", "");

    size_t dtv_off;
    if (db_field("_thread_db_pthread_dtvp", 64, &dtv_off) != 1 || dtv_off != TCB_OFF_DTV)
        return fail("_thread_db_pthread_dtvp", " not at the ABI offset 8");
    if (WORD(tp, TCB_OFF_TCB) != (uintptr_t)tp || WORD(tp, TCB_OFF_SELF) != (uintptr_t)tp ||
        WORD(tp, TCB_OFF_DTV) == 0)
        return fail("x86-64 TCB header check", " failed");
    if (db_field("_thread_db_pthread_tid", 32, &tls_info.tid_off) != 1)
        return fail("_thread_db_pthread_tid", " missing or malformed");
    if (db_field("_thread_db_pthread_list", 128, &tls_info.list_off) != 1)
        return fail("_thread_db_pthread_list", " missing or malformed");
    tls_info.specific_n = db_field("_thread_db_pthread_specific", 64, &tls_info.specific_off);
    if (tls_info.specific_n == 0)
        return fail("_thread_db_pthread_specific", " missing or malformed");
    size_t end = tls_info.sizeof_pthread;
    if (tls_info.list_off < 0x80 || tls_info.list_off + 16 > end || tls_info.tid_off + 4 > end ||
        tls_info.specific_off + 8 * tls_info.specific_n > end)
        return fail("_thread_db_pthread_* offsets", " out of range");

    uintptr_t first = WORD(tp, tls_info.specific_off);
    if (first <= (uintptr_t)tp || first >= (uintptr_t)tp + end)
        return fail("specific[0] probe", " failed");
    tls_info.specific_1st_off = first - (uintptr_t)tp;

    const ptrdiff_t *roff = dlsym(RTLD_DEFAULT, "__rseq_offset");
    const unsigned *rsize = dlsym(RTLD_DEFAULT, "__rseq_size");
    if (!roff || !rsize)
        return fail("__rseq_offset", " not found");
    tls_info.rseq_cpu_off = *roff + 4;
    if (*roff < (ptrdiff_t)tls_info.list_off || (size_t)*roff + 32 > end)
        return fail("__rseq_offset", " outside struct pthread");
    int cpu_id = *(int *)(tp + tls_info.rseq_cpu_off);
    if (*rsize > 0 ? cpu_id < 0 : cpu_id >= 0)
        return fail("rseq cpu_id check", " failed");

    char *resp = priv_sym("__resp");
    if (!resp)
        return fail("__resp", " not found");
    if (resp >= tp || (size_t)(tp - resp) > tls_info.static_size)
        return fail("__resp", " not in static TLS");
    tls_info.resp_off = tp - resp;

    /* libc's TLS block: from libc's link map, its size from PT_TLS. */
    Dl_info info;
    struct link_map *lm = NULL;
    size_t l_tls_offset_off;
    if (!dladdr1((void *)tls_info.ctype_init, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
        return fail("libc link map", " not found");
    if (db_field("_thread_db_link_map_l_tls_offset", 64, &l_tls_offset_off) != 1)
        return fail("_thread_db_link_map_l_tls_offset", " missing or malformed");
    tls_info.libc_tls_off = *(size_t *)((char *)lm + l_tls_offset_off);
    tls_info.libc_tls_size = 0;
    struct phdr_query q = {lm, 0};
    dl_iterate_phdr(find_pt_tls, &q);
    tls_info.libc_tls_size = q.memsz;
    char *blk = tp - tls_info.libc_tls_off;
    char *errp = (char *)&errno;
    if (tls_info.libc_tls_size == 0 || tls_info.libc_tls_size > LIBC_TLS_MAX ||
        tls_info.libc_tls_off % 8 || tls_info.libc_tls_off > tls_info.static_size || errp < blk ||
        errp >= blk + tls_info.libc_tls_size || resp < blk || resp >= blk + tls_info.libc_tls_size)
        return fail("libc TLS block probe", " failed");

    tls_info.stack_guard = WORD(tp, TCB_OFF_STACKGUARD);
    tls_info.pointer_guard = WORD(tp, TCB_OFF_PTRGUARD);
    tls_info.feature_1 = *(uint32_t *)(tp + TCB_OFF_FEATURE_1);
    return NULL;
}

/* State shared between tls_init and its probe threads. */
struct probe {
    size_t guard;
    char *fresh;   /* the TCB the malloc probe runs in */
    char *starter; /* the TCB of the thread that runs the probes (it waits meanwhile) */
    uintptr_t rw[4][2];
    int nrw; /* libc's writable segments, [lo, hi) */
    unsigned char before[LIBC_TLS_MAX], after[LIBC_TLS_MAX];
    bool fresh_ok;
    bool prefilled;     /* the fresh TCB had the starter's thread_arena (arena_guess) */
    void (*then)(void); /* for the probe thread once its probe passed (tls_init) */
};

/* The probe thread's verdict, for a starter that does not join it: the thread may go on
 * (then). */
static struct {
    struct note out;
    const char *why;
} verdict;

/* find_pair returns the unique offset in struct pthread holding (a, b), or 0. */
static size_t find_pair(char *tp, uintptr_t a, uintptr_t b)
{
    size_t found = 0;
    int n = 0;
    for (size_t off = tls_info.list_off; off + 16 <= tls_info.sizeof_pthread; off += 8)
        if (WORD(tp, off) == a && (b == 0 || WORD(tp, off + 8) == b)) {
            found = off;
            n++;
        }
    return n == 1 ? found : 0;
}

/* glibc's own malloc and free, even when the program brings another
 * malloc (jemalloc, tcmalloc): the probe looks for glibc's per-thread
 * words, and another allocator's thread state, set up in a TCB that is
 * thrown away without its thread exit, would stay linked into its lists
 * (jemalloc's: redis would crash at its first mallctl). */
static struct {
    void *(*malloc)(size_t);
    void (*free)(void *);
} glibc_malloc;

/* malloc_probe_fn runs with a fresh TCB installed: snapshot, malloc, snapshot. */
static void malloc_probe_fn(void *arg)
{
    struct probe *pr = arg;
    char *tp = tls_self();
    char *blk = tp - tls_info.libc_tls_off;
    char *errp = (char *)&errno;
    pr->fresh_ok = errno == 0 && errp >= blk && errp < blk + tls_info.libc_tls_size;
    memcpy(pr->before, blk, tls_info.libc_tls_size);
    void *volatile p = glibc_malloc.malloc(24);
    glibc_malloc.free(p);
    memcpy(pr->after, blk, tls_info.libc_tls_size);
}

/*
 * Which of the two words malloc set in a fresh TCB is thread_arena (1 + its index), 0 if
 * not plain. The thread's first malloc attached it to a new arena: glibc's arena of a
 * thread (not main_arena) sits just past the heap_info at the start of its heap, a block
 * aligned to the heap's maximum size (HEAP_MAX_SIZE, 64 MiB on 64-bit), whose first word
 * points back to it; the tcache is a block of that heap, further on. Only the page of
 * the candidate itself is read.
 */
static int arena_word_of(char *tcb, const size_t offs[2])
{
    const uintptr_t heap_max = (uintptr_t)64 << 20;
    int found = 0;
    for (int i = 0; i < 2; i++) {
        uintptr_t w = WORD(tcb, -(ptrdiff_t)offs[i]), heap = w & ~(heap_max - 1);
        if (w - heap >= 4096 || w - heap < sizeof(uintptr_t) || *(uintptr_t *)heap != w)
            continue;
        if (found)
            return 0;
        found = i + 1;
    }
    return found;
}

/* libc's writable segments, where main_arena is: the object of glibc's malloc. */
static int libc_rw_segments(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct probe *pr = arg;
    bool mine = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, m = (uintptr_t)glibc_malloc.malloc;
        mine |= ph->p_type == PT_LOAD && m >= lo && m - lo < ph->p_memsz;
    }
    for (int i = 0; mine && i < info->dlpi_phnum && pr->nrw < 4; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W)) {
            pr->rw[pr->nrw][0] = info->dlpi_addr + ph->p_vaddr;
            pr->rw[pr->nrw][1] = pr->rw[pr->nrw][0] + ph->p_memsz;
            pr->nrw++;
        }
    }
    return mine;
}

/*
 * The offset of the starter's thread_arena, if one word of its libc block alone points into
 * libc's writable data (main_arena, the main thread's) where the fresh TCB has 0; else 0.
 * Given that arena, the probe's malloc attaches none of its own: one arena fewer for good,
 * which every fork locks and unlocks (a page copied in the parent and in the child). A
 * wrong guess leaves malloc to attach one as before, and the words are told as before.
 */
static size_t arena_guess(struct probe *pr)
{
    size_t guess = 0;
    int n = 0;
    dl_iterate_phdr(libc_rw_segments, pr);
    for (size_t i = 0; pr->starter && i + 8 <= tls_info.libc_tls_size; i += 8) {
        size_t off = tls_info.libc_tls_off - i;
        uintptr_t v = WORD(pr->starter, -(ptrdiff_t)off);
        if (!v || WORD(pr->fresh, -(ptrdiff_t)off))
            continue;
        for (int k = 0; k < pr->nrw; k++)
            if (v >= pr->rw[k][0] && v < pr->rw[k][1]) {
                guess = off;
                n++;
            }
    }
    return n == 1 ? guess : 0;
}

/*
 * probe_malloc_words finds the words malloc sets in a fresh TCB's libc
 * block. It runs on a probe thread that has not allocated yet, and hands
 * the tcache and arena the probe created to that thread: glibc frees the
 * tcache when the thread exits, and leaves the arena to the next thread
 * that needs one - if the probe made one at all (arena_guess). (Run elsewhere, the
 * probe would leak a tcache and keep an arena attached for ever: 64 MiB of
 * address space. So glibc's malloc is looked up before the thread starts,
 * by resolve_glibc_malloc: dlopen allocates.)
 */
static const char *probe_malloc_words(struct probe *pr)
{
    char *fresh = pr->fresh;
    if (!glibc_malloc.malloc || !glibc_malloc.free)
        return fail("glibc's malloc", " not found in libc.so.6");
    size_t guess = arena_guess(pr);
    if (guess)
        WORD(fresh, -(ptrdiff_t)guess) = WORD(pr->starter, -(ptrdiff_t)guess);
    tls_call_with_fs(fresh, malloc_probe_fn, pr);
    if (!pr->fresh_ok)
        return fail("fresh TCB errno check", " failed");
    int n = 0, bad = 0;
    size_t offs[2] = {0, 0};
    for (size_t i = 0; i + 8 <= tls_info.libc_tls_size; i += 8) {
        uintptr_t b, a;
        memcpy(&b, pr->before + i, 8);
        memcpy(&a, pr->after + i, 8);
        if (a == b)
            continue;
        if (b != 0 || n == 2)
            bad = 1;
        else
            offs[n++] = tls_info.libc_tls_off - i;
    }
    /* The guess right, malloc set the tcache alone; wrong, both words as ever. */
    pr->prefilled = guess && n == 1 && !bad;
    if (pr->prefilled)
        offs[n++] = guess;
    if (bad || n == 1)
        return fail("malloc state probe", ": unexpected TLS changes");
    tls_info.nmalloc = n;
    tls_info.malloc_off[0] = offs[0];
    tls_info.malloc_off[1] = offs[1];
    tls_info.arena_word = pr->prefilled ? 2 : n == 2 ? arena_word_of(fresh, offs) : 0;
    char *self = tls_self();
    if (n == 2 && WORD(self, -(ptrdiff_t)offs[0]) == 0 && WORD(self, -(ptrdiff_t)offs[1]) == 0)
        tls_malloc_move(fresh, self);
    return NULL;
}

/*
 * find_stackblock finds stackblock, stackblock_size, guardsize, reported_guardsize in a
 * row in the TCB tp of a thread glibc made with stack size asked and guard size guard:
 * a block holding the frame at sp, of asked bytes or asked plus the guard (glibc adds
 * it), the guard size twice after. 0 unless exactly one place fits; probe_check_stack
 * later checks it against glibc's own pthread_getattr_np.
 */
static size_t find_stackblock(char *tp, const char *sp, size_t asked, size_t guard)
{
    size_t found = 0;
    int n = 0;
    for (size_t off = tls_info.list_off; off + 32 <= tls_info.sizeof_pthread; off += 8) {
        const char *block = (const char *)WORD(tp, off);
        size_t size = WORD(tp, off + 8);
        if ((size == asked || size == asked + guard) && sp >= block && sp < block + size &&
            WORD(tp, off + 16) == guard && WORD(tp, off + 24) == guard) {
            found = off;
            n++;
        }
    }
    return n == 1 ? found : 0;
}

/* The fields of the probe thread's own struct pthread that need no allocation to find. */
static const char *probe_own_tcb(struct probe *pr)
{
    char *tp = tls_self();
    char here;
    tls_info.stackblock_off = find_stackblock(tp, &here, PROBE_STACK_SIZE, pr->guard);
    if (!tls_info.stackblock_off)
        return fail("stackblock probe", " failed");

    long head = 0, len = 0;
    if (rt_syscall(SYS_get_robust_list, 0, &head, &len) != 0 || (char *)head <= tp ||
        (char *)head + 24 > tp + tls_info.sizeof_pthread || len != 24)
        return fail("get_robust_list probe", " failed");
    tls_info.robust_head_off = (char *)head - tp;
    if (WORD(tp, tls_info.robust_head_off) != (uintptr_t)head ||
        WORD(tp, tls_info.robust_head_off - 8) != (uintptr_t)head)
        return fail("robust list layout", " unexpected");
    tls_info.futex_offset = (long)WORD(tp, tls_info.robust_head_off + 8);

    char *res = *(char **)(tp - tls_info.resp_off);
    if (res <= tp || res >= tp + tls_info.sizeof_pthread)
        return fail("__resp probe", " failed");
    tls_info.res_off = res - tp;
    return NULL;
}

/* The strerror/strsignal buffers, and the stack fields against glibc's view (both
 * allocate: after the malloc probe). */
static const char *probe_allocating(void)
{
    char *tp = tls_self();
    char *e = strerror(987654);
    char *s = strsignal(98765);
    tls_info.tls_state_off[0] = find_pair(tp, (uintptr_t)e, 0);
    tls_info.tls_state_off[1] = find_pair(tp, (uintptr_t)s, 0);
    if (!tls_info.tls_state_off[0] || !tls_info.tls_state_off[1])
        return fail("strerror/strsignal buffer probe", " failed");

    pthread_attr_t attr;
    void *addr = NULL;
    size_t size = 0, guard = 0;
    if (libc_pthread_getattr_np(libc_pthread_self(), &attr) != 0)
        return fail("pthread_getattr_np", " failed on the probe thread");
    int err = pthread_attr_getstack(&attr, &addr, &size) | pthread_attr_getguardsize(&attr, &guard);
    pthread_attr_destroy(&attr);
    char *block = (char *)WORD(tp, tls_info.stackblock_off);
    size_t whole = WORD(tp, tls_info.stackblock_off + 8);
    if (err || guard != WORD(tp, tls_info.stackblock_off + 24) ||
        (char *)addr + size != block + whole || size + guard != whole)
        return fail("stackblock probe", ": glibc's pthread_getattr_np disagrees");
    return NULL;
}

/*
 * probe_thread runs on a thread glibc made with the default guard: first what needs no
 * allocation, then the malloc probe (the thread must not have allocated yet), then the
 * rest.
 */
static void *probe_thread(void *arg)
{
    struct probe *pr = arg;
    const char *why = probe_own_tcb(pr);
    if (!why) {
        tls_tcb_fill(pr->fresh); /* its offsets are known now; writes only */
        why = probe_malloc_words(pr);
    }
    why = why ? why : probe_allocating();
    /* The starter's arena, given (prefilled), was never attached: off this thread before it
     * ends, which would detach it. One the probe attached goes to glibc's free list then. */
    void *self = tls_self();
    if (!why && pr->prefilled)
        WORD(self, -(ptrdiff_t)tls_info.malloc_off[tls_info.arena_word - 1]) = 0;
    void (*then)(void) = pr->then; /* pr is the starter's once the verdict is out */
    verdict.why = why;
    notewakeup(&verdict.out);
    if (!why && then)
        then();
    return NULL;
}

/* resolve_glibc_malloc finds glibc's malloc and free (see probe_malloc_words). */
static void resolve_glibc_malloc(void)
{
    void *libc = libc_dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    glibc_malloc.malloc = libc ? (void *(*)(size_t))dlsym(libc, "malloc") : NULL;
    glibc_malloc.free = libc ? (void (*)(void *))dlsym(libc, "free") : NULL;
}

/*
 * run_probe_thread runs probe_thread on a real pthread, detached, with the default guard,
 * a stack of PROBE_STACK_SIZE bytes (glibc keeps the stack of an ended thread for its
 * next one of a like size, a helper thread: one of the default size, 8 MiB, would stay
 * reserved for ever, which a small RLIMIT_AS feels) and every signal blocked but glibc's
 * SIGCANCEL and SIGSETXID (as a helper's: it may go on as one); runs meanwhile here while
 * it probes, and returns its verdict.
 */
static const char *run_probe_thread(struct probe *pr, void (*meanwhile)(void))
{
    pthread_attr_t attr;
    pthread_t th;
    const char *why = NULL;
    if (pthread_attr_init(&attr) != 0)
        return fail("pthread_attr_init", " failed");
    if (pthread_attr_getguardsize(&attr, &pr->guard) != 0 || pr->guard == 0)
        why = fail("default guard size", " is 0");
    pthread_attr_setstacksize(&attr, PROBE_STACK_SIZE);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = 0;
    if (!why) {
        noteclear(&verdict.out);
        uint64_t old = rt_mask_swap(RT_MASK_OWN_THREAD);
        err = libc_pthread_create(&th, &attr, probe_thread, pr);
        rt_mask_swap(old);
    }
    if (err) {
        probe_thread_err = err;
        why = fail("probe thread", " could not be created");
    } else if (!why) {
        if (meanwhile)
            meanwhile();
        notesleep(&verdict.out);
        why = verdict.why;
    }
    pthread_attr_destroy(&attr);
    return why;
}

/*
 * probe_all runs every probe; want_ldt: the ldt method is next in the
 * chain; forced: the GOSHIM_FS value the user gave, or NULL. One thread
 * serves them all (a thread made and joined costs 0.2-0.4 ms here).
 */
static const char *probe_all(bool want_ldt, const char *forced, void (*meanwhile)(void),
                             void (*then)(void))
{
    const char *why;
    memset(&tls_info, 0, sizeof tls_info); /* unknown offsets read as 0 (see free_thread_buffers) */
    if ((why = probe_symbols()) || (why = probe_layout()))
        return why;
    probe_reinit();
    if (want_ldt)
        start_ldt(forced); /* the TCBs made from here on may come from the arena */
    struct probe *pr =
        mmap(NULL, sizeof *pr, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pr == MAP_FAILED)
        return fail("probe memory", " unavailable");
    resolve_glibc_malloc();
    pr->starter = tls_self();
    pr->then = then;
    /* Allocated here: the probe thread fills it once it knows the offsets. */
    if (!(pr->fresh = tls_tcb_alloc()))
        why = fail("probe TCB allocation", " failed");
    else
        why = run_probe_thread(pr, meanwhile);
    if (pr->fresh)
        tls_tcb_destroy(pr->fresh);
    munmap(pr, sizeof *pr);
    return why;
}

static const char errno_mode_effect[] =
    "errno is per thread, __thread variables are shared by threads on one OS thread";

int tls_init(int want, void (*meanwhile)(void), void (*then)(void))
{
    tls_mode = TLS_MODE_ERRNO;
    tls_fs_method = TLS_FS_NONE;
    ldt_arena_len = 0;
    if (want == TLS_MODE_ERRNO) {
        rt_print(2, "goshim: GOSHIM_TLS=errno mode: %s\n", errno_mode_effect);
        return tls_mode;
    }
    /*
     * The probes already switch FS (the malloc probe), so the method comes
     * first: wrfsbase now, ldt once the layout is known (probe_all), else
     * arch_prctl.
     */
    bool forced;
    int fs_want = fs_request(&forced);
    tls_fs_method = TLS_FS_ARCH_PRCTL;
    if (fs_want == TLS_FS_WRFSBASE && have_wrfsbase())
        tls_fs_method = TLS_FS_WRFSBASE;
    else if (fs_want == TLS_FS_WRFSBASE && forced)
        rt_print(2, "goshim: GOSHIM_FS=wrfsbase unavailable: the kernel does not allow wrfsbase "
                    "here (AT_HWCAP2 lacks HWCAP2_FSGSBASE); trying ldt\n");
    bool want_ldt = tls_fs_method != TLS_FS_WRFSBASE && fs_want != TLS_FS_ARCH_PRCTL;
    probe_thread_err = 0;
    const char *why =
        probe_all(want_ldt, forced ? tls_fs_method_name(fs_want) : NULL, meanwhile, then);
    if (why && probe_thread_err) {
        /* No thread to spare (RLIMIT_NPROC, threads-max, pids.max): errno mode would
         * share the __thread variables of the program's threads; better not start. */
        tls_fs_method = TLS_FS_NONE;
        ldt_arena_len = 0;
        return -probe_thread_err;
    }
    if (why) {
        tls_fs_method = TLS_FS_NONE;
        ldt_arena_len = 0;
        rt_print(2, "goshim: per-thread TLS unavailable (%s); using GOSHIM_TLS=errno mode: %s\n",
                 why, errno_mode_effect);
        return tls_mode;
    }
    tls_mode = TLS_MODE_FULL;
    tls_tid_off = tls_info.tid_off;
    return tls_mode;
}
