/*
 * C11 <threads.h>: threads, mutexes, condition variables, thread-specific
 * storage with destructors, call_once and thrd_exit, the same natively and
 * under goshim (where glibc's C11 functions would otherwise bypass the shim).
 */
#include <stdio.h>
#include <threads.h>

static mtx_t m;
static cnd_t c;
static int turn, counter, dtors;
static tss_t key;
static once_flag once = ONCE_FLAG_INIT;
static int once_runs;

static void count_once(void)
{
    once_runs++;
}

static void dtor(void *v)
{
    mtx_lock(&m);
    dtors += (int)(long)v;
    mtx_unlock(&m);
}

static int player(void *arg)
{
    int me = (int)(long)arg;
    call_once(&once, count_once);
    tss_set(key, (void *)1L);
    for (int i = 0; i < 1000; i++) {
        mtx_lock(&m);
        while (turn % 2 != me)
            cnd_wait(&c, &m);
        turn++;
        counter++;
        cnd_broadcast(&c);
        mtx_unlock(&m);
    }
    return me + 40;
}

static int quitter(void *arg)
{
    (void)arg;
    thrd_exit(7);
}

int main(void)
{
    mtx_init(&m, mtx_plain);
    cnd_init(&c);
    tss_create(&key, dtor);
    thrd_t a, b, q;
    thrd_create(&a, player, (void *)0L);
    thrd_create(&b, player, (void *)1L);
    int ra = 0, rb = 0, rq = 0;
    thrd_join(a, &ra);
    thrd_join(b, &rb);
    thrd_create(&q, quitter, NULL);
    thrd_join(q, &rq);
    printf("turns %d, results %d %d, thrd_exit %d, tss destructors %d, once %d\n", turn, ra, rb, rq,
           dtors, once_runs);
    mtx_t r;
    mtx_init(&r, mtx_recursive);
    int ok = mtx_lock(&r) == thrd_success && mtx_trylock(&r) == thrd_success;
    mtx_unlock(&r);
    mtx_unlock(&r);
    printf("recursive mtx: %s\n", ok ? "ok" : "FAILED");
    return turn == 2000 && ra == 40 && rb == 41 && rq == 7 && dtors == 2 && once_runs == 1 && ok
               ? 0
               : 1;
}
