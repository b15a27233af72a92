/*
 * prog_loaded_objects: the shared objects a threaded program has loaded, once its
 * threads have come and gone.
 *
 *   usage: prog_loaded_objects
 *
 * Four threads each add to a counter under a mutex and return (no pthread_exit, no
 * cancellation, nothing that computes for long); main joins them, then prints the base
 * name of every object dl_iterate_phdr lists, one a line, but the program itself, the
 * vDSO and a preloaded libgoshim*.so. Natively glibc loads no library for that (libgcc_s,
 * its unwinder, only at a thread's first pthread_exit or cancellation); a runtime under
 * the program should load none either that the program never needed: a program can see
 * them (dl_iterate_phdr, /proc/self/maps), and each costs the start its loading.
 *
 * Exit 0, or 2 (a call failed), 3 (a wrong count).
 */
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long counter;

static void *adder(void *arg)
{
    pthread_mutex_lock(&mu);
    counter++;
    pthread_mutex_unlock(&mu);
    return arg;
}

static int print_one(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    const char *slash = strrchr(info->dlpi_name, '/');
    const char *base = slash ? slash + 1 : info->dlpi_name;
    if (*base && strncmp(base, "linux-vdso", 10) != 0 && strncmp(base, "libgoshim", 9) != 0)
        printf("%s\n", base);
    return 0;
}

int main(void)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        if ((errno = pthread_create(&t[i], NULL, adder, NULL)) != 0) {
            perror("prog_loaded_objects: pthread_create");
            return 2;
        }
    for (int i = 0; i < 4; i++)
        if ((errno = pthread_join(t[i], NULL)) != 0) {
            perror("prog_loaded_objects: pthread_join");
            return 2;
        }
    if (counter != 4)
        return 3;
    dl_iterate_phdr(print_one, NULL);
    return 0;
}
