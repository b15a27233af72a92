/*
 * A library with initial-exec TLS (libgoshim_tlsie.so, DF_STATIC_TLS)
 * dlopen'ed while threads exist: every thread must read its initial image
 * (distinct bytes, an int 1, zeros), as natively, where glibc copies the
 * image into every thread before dlopen returns.
 *
 *   prog_dlopen_ietls [how]
 *     main    (default) the main thread dlopens the library
 *     thread  a thread other than main dlopens it, and reads it at once
 *     nested  main dlopens libgoshim_tlsouter.so (initial-exec TLS of its
 *             own), whose constructor dlopens libgoshim_tlsie.so
 *     reload  main dlopens it, every thread reads and changes it, main
 *             dlcloses it (unloaded) and dlopens it again: every thread
 *             reads the image again
 *     churn   main unloads and loads it again and again while threads
 *             come and go (spawned, joined) and others live on: each reads
 *             the image first after every load (prints one line)
 *
 * Threads, each printing in turn: 3 that have run and block on a
 * semaphore before the dlopen, 3 created just before it (they may not
 * have run yet), one created after it, then main. Each changes its own
 * copy after reading it: the next must not see that.
 */
#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prog_check.h"

enum { STARTED = 3, UNSTARTED = 3, WAITERS = STARTED + UNSTARTED };

static int (*mod_read)(unsigned char out[16], int *zero);
static void (*mod_bump)(void);
static int (*outer_get)(void);
static sem_t go[WAITERS + 1], done, started;
static int rounds = 1;
static void *lib;

/* Print the calling thread's view of the module's TLS, then change it. */
static void show(const char *who, long id)
{
    unsigned char b[16];
    int zero;
    int one = mod_read(b, &zero);
    printf("%s %ld:", who, id);
    for (int i = 0; i < 16; i++)
        printf(" %02x", b[i]);
    printf(" one=%d zero=%s", one, zero ? "yes" : "no");
    if (outer_get)
        printf(" outer=%x", outer_get());
    printf("\n");
    fflush(stdout);
    mod_bump();
}

static void *waiter(void *arg)
{
    long id = (long)arg;
    if (id < STARTED)
        CHECK(sem_post(&started) == 0);
    for (int r = 0; r < rounds; r++) {
        while (sem_wait(&go[id]) != 0)
            ;
        show("waiter", id);
        CHECK(sem_post(&done) == 0);
    }
    return NULL;
}

static void lib_path(char *path, const char *name)
{
    ssize_t n = readlink("/proc/self/exe", path, PATH_MAX - 64);
    CHECK(n > 0);
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    strcpy(slash ? slash + 1 : path, name);
}

/* dl_iterate_phdr: whether libgoshim_tlsie.so is loaded with DF_STATIC_TLS. */
static int static_tls_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    if (!strstr(info->dlpi_name, "libgoshim_tlsie.so"))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
            continue;
        for (const ElfW(Dyn) *d = (const void *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
             d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_STATIC_TLS))
                *(int *)arg = 1;
    }
    return 1;
}

static void *open_lib(const char *name)
{
    char path[PATH_MAX];
    lib_path(path, name);
    void *h = dlopen(path, RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(1);
    }
    return h;
}

static void bind_mod(void *h)
{
    mod_read = (int (*)(unsigned char *, int *))dlsym(h, "tlsie_read");
    mod_bump = (void (*)(void))dlsym(h, "tlsie_bump");
    CHECK(mod_read && mod_bump);
}

static void load_quiet(void)
{
    lib = open_lib("libgoshim_tlsie.so");
    bind_mod(lib);
}

static void load(const char *how)
{
    void *h;
    if (strcmp(how, "nested") == 0) {
        void *outer = open_lib("libgoshim_tlsouter.so");
        void *(*inner)(void) = (void *(*)(void))dlsym(outer, "tlsouter_inner");
        outer_get = (int (*)(void))dlsym(outer, "tlsouter_get");
        CHECK(inner && outer_get && (h = inner()) != NULL);
    } else {
        h = open_lib("libgoshim_tlsie.so");
    }
    bind_mod(h);
    int st = 0;
    dl_iterate_phdr(static_tls_cb, &st);
    printf("static tls: %s\n", st ? "yes" : "no");
    lib = h;
}

/* Each waiter in turn reads (and changes) its copy. */
static void round_of_waiters(void)
{
    for (long i = 0; i <= WAITERS; i++) {
        CHECK(sem_post(&go[i]) == 0);
        while (sem_wait(&done) != 0)
            ;
    }
}

/* dlclose the library: it must be gone (else its TLS would not start afresh). */
static void unload(void)
{
    char path[PATH_MAX];
    lib_path(path, "libgoshim_tlsie.so");
    EXPECT(dlclose(lib), 0);
    if (dlopen(path, RTLD_LAZY | RTLD_NOLOAD)) {
        fprintf(stderr, "libgoshim_tlsie.so still loaded after dlclose\n");
        exit(1);
    }
}

/* ---- churn ---- */

static pthread_rwlock_t churn_lk = PTHREAD_RWLOCK_INITIALIZER;
static int churn_gen; /* loads so far; churn_lk */
static int churn_stop, churn_bad, churn_short_runs;

/* The calling thread's copy is the image (then it changes it). churn_lk read-held. */
static void churn_check(const char *who)
{
    static const unsigned char img[16] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
                                          0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xf1, 0xf2};
    unsigned char b[16];
    int zero;
    int one = mod_read(b, &zero);
    if (one != 1 || !zero || memcmp(b, img, sizeof b) != 0) {
        __atomic_add_fetch(&churn_bad, 1, __ATOMIC_RELAXED);
        fprintf(stderr, "churn: %s thread after load %d: one=%d zero=%d bytes %02x %02x ... %02x\n",
                who, churn_gen, one, zero, b[0], b[1], b[15]);
    }
    mod_bump();
}

static void *churn_short(void *arg)
{
    (void)arg;
    EXPECT(pthread_rwlock_rdlock(&churn_lk), 0);
    if (churn_gen > 0)
        churn_check("short");
    EXPECT(pthread_rwlock_unlock(&churn_lk), 0);
    __atomic_add_fetch(&churn_short_runs, 1, __ATOMIC_RELAXED);
    return NULL;
}

static void *churn_spawner(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&churn_stop, __ATOMIC_RELAXED)) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
            EXPECT(pthread_create(&t[i], NULL, churn_short, NULL), 0);
        for (int i = 0; i < 4; i++)
            EXPECT(pthread_join(t[i], NULL), 0);
    }
    return NULL;
}

static void *churn_long(void *arg)
{
    int seen = 0;
    (void)arg;
    while (!__atomic_load_n(&churn_stop, __ATOMIC_RELAXED)) {
        EXPECT(pthread_rwlock_rdlock(&churn_lk), 0);
        if (churn_gen != seen) {
            churn_check("long");
            seen = churn_gen;
        }
        EXPECT(pthread_rwlock_unlock(&churn_lk), 0);
        sched_yield();
    }
    return NULL;
}

static void churn(void)
{
    enum { SPAWNERS = 2, LONG = 4 };
    pthread_t sp[SPAWNERS], lg[LONG];
    long loads = scaled(300);
    for (int i = 0; i < SPAWNERS; i++)
        EXPECT(pthread_create(&sp[i], NULL, churn_spawner, NULL), 0);
    for (int i = 0; i < LONG; i++)
        EXPECT(pthread_create(&lg[i], NULL, churn_long, NULL), 0);
    for (long n = 0; n < loads; n++) {
        while (n % 50 == 0 && __atomic_load_n(&churn_short_runs, __ATOMIC_RELAXED) < n)
            sched_yield(); /* short threads keep coming while it loads */
        EXPECT(pthread_rwlock_wrlock(&churn_lk), 0);
        if (churn_gen > 0)
            unload();
        load_quiet();
        churn_gen++;
        EXPECT(pthread_rwlock_unlock(&churn_lk), 0);
        for (int y = 0; y < 8; y++)
            sched_yield();
    }
    __atomic_store_n(&churn_stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < SPAWNERS; i++)
        EXPECT(pthread_join(sp[i], NULL), 0);
    for (int i = 0; i < LONG; i++)
        EXPECT(pthread_join(lg[i], NULL), 0);
    printf("churn: every thread read the image after every load: %s\n",
           churn_bad == 0 && churn_short_runs > 0 ? "yes" : "no");
    if (churn_bad)
        fprintf(stderr, "churn: %d bad reads in %ld loads, %d short threads\n", churn_bad, loads,
                churn_short_runs);
}

static void *opener(void *arg)
{
    load(arg);
    show("opener", 0);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *how = argc > 1 ? argv[1] : "main";
    bool reload = strcmp(how, "reload") == 0;
    if (strcmp(how, "churn") == 0) {
        churn();
        return 0;
    }
    if (reload)
        rounds = 2;
    pthread_t t[WAITERS + 1];
    CHECK(sem_init(&done, 0, 0) == 0 && sem_init(&started, 0, 0) == 0);
    for (long i = 0; i <= WAITERS; i++)
        CHECK(sem_init(&go[i], 0, 0) == 0);
    for (long i = 0; i < STARTED; i++)
        EXPECT(pthread_create(&t[i], NULL, waiter, (void *)i), 0);
    for (long i = 0; i < STARTED; i++)
        while (sem_wait(&started) != 0)
            ;
    for (long i = STARTED; i < WAITERS; i++)
        EXPECT(pthread_create(&t[i], NULL, waiter, (void *)i), 0);

    if (strcmp(how, "thread") == 0) {
        pthread_t o;
        EXPECT(pthread_create(&o, NULL, opener, (void *)how), 0);
        EXPECT(pthread_join(o, NULL), 0);
    } else {
        load(how);
    }
    EXPECT(pthread_create(&t[WAITERS], NULL, waiter, (void *)(long)WAITERS), 0);
    round_of_waiters();
    if (reload) {
        unload();
        load(how);
        round_of_waiters();
    }
    for (long i = 0; i <= WAITERS; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    show("main", 0);
    return 0;
}
