/*
 * prog_main_stack: the main thread's stack as pthread_getattr_np gives it, against glibc's
 * own answer in the same process.
 *
 *   usage: prog_main_stack check
 *          prog_main_stack limit KB     (RLIMIT_STACK set to KB KiB, 0: unlimited; then
 *                                        this program again, exec'd, with "check")
 *
 * check makes and joins a thread first (a runtime under the program starts there), then
 * asks pthread_getattr_np for the main thread's stack and glibc's pthread_getattr_np
 * (looked up in libc.so.6 itself, past any library that interposes it) too. Prints
 * "main stack: as glibc's" or both answers. glibc derives it from the mapping holding
 * __libc_stack_end, the soft RLIMIT_STACK and the mapping below: the exec'd runs move all
 * three.
 *
 * Exit 0, or 1 (usage), 2 (a call failed), 3 (the answers differ).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static void *nothing(void *arg)
{
    return arg;
}

static int stack_of(int (*getattr)(pthread_t, pthread_attr_t *), void **lo, size_t *size)
{
    pthread_attr_t a;
    if (getattr(pthread_self(), &a) != 0)
        return -1;
    int err = pthread_attr_getstack(&a, lo, size);
    pthread_attr_destroy(&a);
    return err;
}

static int check(void)
{
    pthread_t t;
    if ((errno = pthread_create(&t, NULL, nothing, NULL)) != 0 || pthread_join(t, NULL) != 0) {
        perror("prog_main_stack: pthread_create");
        return 2;
    }
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    int (*glibc)(pthread_t, pthread_attr_t *) = libc ? dlsym(libc, "pthread_getattr_np") : NULL;
    void *lo = NULL, *glo = NULL;
    size_t size = 0, gsize = 0;
    if (!glibc || stack_of(pthread_getattr_np, &lo, &size) != 0 ||
        stack_of(glibc, &glo, &gsize) != 0) {
        fprintf(stderr, "prog_main_stack: pthread_getattr_np failed\n");
        return 2;
    }
    if (lo == glo && size == gsize) {
        printf("main stack: as glibc's\n");
        return 0;
    }
    printf("main stack: %p + %zu, glibc's %p + %zu\n", lo, size, glo, gsize);
    return 3;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "check"))
        return check();
    if (argc != 3 || strcmp(argv[1], "limit")) {
        fprintf(stderr, "usage: prog_main_stack check | limit KB\n");
        return 1;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_STACK, &rl) != 0)
        return 2;
    long kb = atol(argv[2]);
    rl.rlim_cur = kb ? (rlim_t)kb * 1024 : RLIM_INFINITY;
    if (rl.rlim_cur > rl.rlim_max)
        rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_STACK, &rl) != 0) {
        perror("prog_main_stack: setrlimit");
        return 2;
    }
    char *args[] = {argv[0], "check", NULL};
    execv("/proc/self/exe", args);
    perror("prog_main_stack: exec");
    return 2;
}
