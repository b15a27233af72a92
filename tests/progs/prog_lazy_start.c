/*
 * prog_lazy_start: a process runs as natively until its first thread, and
 * what it did meanwhile holds afterwards (goshim starts its runtime at the
 * first pthread_create unless told otherwise: GOSHIM_START).
 *
 *   prog_lazy_start held     before any thread: prints the process's
 *                            threads and open descriptors (1; 0 1 2: nothing
 *                            of goshim's), then takes a mutex, a recursive
 *                            mutex twice, an rwlock for writing and one for
 *                            reading, each through glibc; a thread then
 *                            finds each taken (trylock: EBUSY) and waits
 *                            for it in turn, getting it only once main has
 *                            let go of it; then a semaphore main posts
 *   prog_lazy_start atfork   fork handlers registered before any thread; a
 *                            thread with a thread-local value of its own
 *                            forks: the prepare handler sees that value (it
 *                            runs on the forking thread's TLS), and the
 *                            child's handler creates and joins a thread of
 *                            its own (it runs once the child can)
 *
 * Output is the same natively; exit 0, or 1 on a failed call.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

static int count_entries(const char *dir, char *list, size_t len)
{
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int fd = dirfd(d), n = 0;
    size_t at = 0;
    list[0] = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == fd)
            continue;
        n++;
        at += (size_t)snprintf(list + at, at < len ? len - at : 0, " %s", e->d_name);
    }
    closedir(d);
    return n;
}

/* ---- held --------------------------------------------------------------------------- */

static pthread_mutex_t plain = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t rec;
static pthread_rwlock_t wlocked = PTHREAD_RWLOCK_INITIALIZER;
static pthread_rwlock_t rlocked = PTHREAD_RWLOCK_INITIALIZER;
static sem_t posted;
static sem_t step; /* the waiter says it is about to wait for the next object */

static int let_go; /* atomic: objects main has let go of, counted just before each */

/* The waiter cannot have obj yet (try: EBUSY), and gets it only once main let go of it. */
#define TRY_THEN_WAIT(try, take, release, nth)                                                     \
    do {                                                                                           \
        EXPECT(try, EBUSY);                                                                        \
        EXPECT(sem_post(&step), 0);                                                                \
        EXPECT(take, 0);                                                                           \
        EXPECT(__atomic_load_n(&let_go, __ATOMIC_SEQ_CST) >= (nth), 1);                            \
        EXPECT(release, 0);                                                                        \
    } while (0)

static void *waiter(void *arg)
{
    (void)arg;
    TRY_THEN_WAIT(pthread_mutex_trylock(&plain), pthread_mutex_lock(&plain),
                  pthread_mutex_unlock(&plain), 1);
    TRY_THEN_WAIT(pthread_mutex_trylock(&rec), pthread_mutex_lock(&rec), pthread_mutex_unlock(&rec),
                  2);
    TRY_THEN_WAIT(pthread_rwlock_tryrdlock(&wlocked), pthread_rwlock_rdlock(&wlocked),
                  pthread_rwlock_unlock(&wlocked), 3);
    TRY_THEN_WAIT(pthread_rwlock_trywrlock(&rlocked), pthread_rwlock_wrlock(&rlocked),
                  pthread_rwlock_unlock(&rlocked), 4);
    while (sem_wait(&posted) != 0)
        ;
    return NULL;
}

static void wait_step(void)
{
    while (sem_wait(&step) != 0)
        ;
}

static int held(void)
{
    char fds[256], tasks[256];
    int nt = count_entries("/proc/self/task", tasks, sizeof tasks);
    count_entries("/proc/self/fd", fds, sizeof fds);
    printf("before the first thread: %d thread, descriptors%s\n", nt, fds);
    pthread_mutexattr_t ma;
    EXPECT(pthread_mutexattr_init(&ma), 0);
    EXPECT(pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE), 0);
    EXPECT(pthread_mutex_init(&rec, &ma), 0);
    EXPECT(sem_init(&posted, 0, 0), 0);
    EXPECT(sem_init(&step, 0, 0), 0);
    EXPECT(pthread_mutex_lock(&plain), 0);
    EXPECT(pthread_mutex_lock(&rec), 0);
    EXPECT(pthread_mutex_lock(&rec), 0);
    EXPECT(pthread_rwlock_wrlock(&wlocked), 0);
    EXPECT(pthread_rwlock_rdlock(&rlocked), 0);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, waiter, NULL), 0);
    wait_step();
    __atomic_add_fetch(&let_go, 1, __ATOMIC_SEQ_CST);
    EXPECT(pthread_mutex_unlock(&plain), 0);
    wait_step();
    EXPECT(pthread_mutex_unlock(&rec), 0);
    __atomic_add_fetch(&let_go, 1, __ATOMIC_SEQ_CST);
    EXPECT(pthread_mutex_unlock(&rec), 0);
    wait_step();
    __atomic_add_fetch(&let_go, 1, __ATOMIC_SEQ_CST);
    EXPECT(pthread_rwlock_unlock(&wlocked), 0);
    wait_step();
    __atomic_add_fetch(&let_go, 1, __ATOMIC_SEQ_CST);
    EXPECT(pthread_rwlock_unlock(&rlocked), 0);
    EXPECT(sem_post(&posted), 0);
    EXPECT(pthread_join(t, NULL), 0);
    printf("held across the first thread: mutex, recursive mutex, rwlocks, semaphore: ok\n");
    return 0;
}

/* ---- atfork --------------------------------------------------------------------------- */

static __thread int mine;
static int seen_in_prepare;
static volatile int child_thread_ran;

static void prepare(void)
{
    seen_in_prepare = mine;
}

static void *in_child(void *arg)
{
    (void)arg;
    child_thread_ran = 1;
    return NULL;
}

static void child(void)
{
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, in_child, NULL), 0);
    EXPECT(pthread_join(t, NULL), 0);
}

static void *forker(void *arg)
{
    (void)arg;
    mine = 7;
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        _exit(child_thread_ran ? 0 : 3);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    printf("prepare saw the forking thread's value: %d; child's handler made a thread: %s\n",
           seen_in_prepare, WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "yes" : "no");
    return NULL;
}

static int atfork(void)
{
    EXPECT(pthread_atfork(prepare, NULL, child), 0);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, forker, NULL), 0);
    EXPECT(pthread_join(t, NULL), 0);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 2 && !strcmp(argv[1], "held"))
        return held();
    if (argc == 2 && !strcmp(argv[1], "atfork"))
        return atfork();
    fprintf(stderr, "usage: prog_lazy_start held|atfork\n");
    return 2;
}
