/*
 * The runtime's lasting objects - struct m, g and p, never freed (a G may be asked about
 * at any time, an M stays on sched.allm) - come from here: a bump allocator over mappings
 * of goshim's own, not from malloc.
 *
 * Why not malloc: a fork child touches its M and G first thing (fork.c), and its P soon
 * after. From malloc they lie in the program's heap or in an arena of an M's, regions of
 * the address space a child that execs or exits at once may touch nowhere else; on a guest
 * whose shadow page tables are built per region as the child first touches it, that first
 * touch costs the child several times a page's. Mapped by goshim, they lie below the
 * libraries, among the thread stacks and descriptors the child touches anyway. And P0, the
 * count of Gs whose calls kept their P (sched.nkept), the main thread's M and its G, made
 * one after the other from a new page (rtpool_new_page), share one: a fork by the main
 * thread copies one page of them, not four, in the parent (written as it waits for the
 * child) and in the child.
 *
 * Sanitizer builds keep malloc: LeakSanitizer scans the heap, not these mappings, for the
 * pointers these objects hold.
 */
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "libc.h"
#include "sched.h"

/* Chunks grow with what the pool holds, a sixteenth of it, from 64 KiB to 1 MiB: few
 * mappings for a million Gs, and little address space left unused in the last chunk
 * (under RLIMIT_AS that is threads the program cannot make). */
enum { POOL_CHUNK_MIN = 64 << 10, POOL_CHUNK_MAX = 1 << 20 };

static struct {
    struct runtime_lock lock;
    char *next, *end; /* the current chunk's free part */
    size_t mapped;    /* all chunks */
} pool;

/* Fork child: a thread of the parent's may have held the lock (the child's runtime reset). */
void rtpool_fork_child(void)
{
    FORK_SET(pool.lock.key, 0);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
void *rtpool_zeroed(size_t len)
{
    return rt_calloc(1, len);
}

void rtpool_zeroed_free(void *p, size_t len)
{
    (void)len;
    rt_free(p);
}

void rtpool_new_page(void)
{
}

void *rtpool_alloc(size_t size, size_t align)
{
    void *p = rt_memalign(align, size);
    if (p)
        memset(p, 0, size);
    return p;
}
#else
/* Not MAP_NORESERVE: gdb's gcore leaves such mappings out (the G stacks), and a core must
 * keep these objects. */
void *rtpool_zeroed(size_t len)
{
    long m = rt_syscall6(SYS_mmap, 0, (long)len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m < 0 && m > -4096 ? NULL : (void *)m;
}

void rtpool_zeroed_free(void *p, size_t len)
{
    rt_syscall(SYS_munmap, p, len, 0);
}

/* From a new chunk; NULL if none can be mapped. Under pool.lock. */
static char *chunk_carve(size_t size, size_t align)
{
    size_t len = (pool.mapped / 16 + POOL_CHUNK_MIN - 1) & ~(size_t)(POOL_CHUNK_MIN - 1);
    len = len < POOL_CHUNK_MIN ? POOL_CHUNK_MIN : len > POOL_CHUNK_MAX ? POOL_CHUNK_MAX : len;
    void *m = rtpool_zeroed(len);
    if (!m)
        return NULL;
    pool.mapped += len;
    pool.next = m;
    pool.end = (char *)m + len;
    char *p = (char *)(((uintptr_t)pool.next + align - 1) & ~(uintptr_t)(align - 1));
    pool.next = p + size;
    return p;
}

void rtpool_new_page(void)
{
    runtime_lock(&pool.lock);
    if (pool.next)
        pool.next = (char *)(((uintptr_t)pool.next + 4095) & ~(uintptr_t)4095);
    runtime_unlock(&pool.lock);
}

void *rtpool_alloc(size_t size, size_t align)
{
    char *p = NULL;
    if (size + align <= POOL_CHUNK_MIN) {
        runtime_lock(&pool.lock);
        p = (char *)(((uintptr_t)pool.next + align - 1) & ~(uintptr_t)(align - 1));
        if (!pool.next || p + size > pool.end)
            p = chunk_carve(size, align);
        else
            pool.next = p + size;
        runtime_unlock(&pool.lock);
        if (p)
            return p; /* zero: a fresh mapping, never handed out before */
    }
    p = rt_memalign(align, size);
    if (p)
        memset(p, 0, size);
    return p;
}
#endif
