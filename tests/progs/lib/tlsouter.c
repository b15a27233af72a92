/*
 * libgoshim_tlsouter.so: a module with initial-exec TLS of its own whose
 * constructor dlopens libgoshim_tlsie.so (from its own directory): a
 * dlopen nested in a dlopen, as prog_dlopen_ietls's "nested" case loads it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

__thread int tlsouter_val = 0x5eed;
static void *inner;

__attribute__((constructor)) static void tlsouter_init(void)
{
    Dl_info info;
    char path[PATH_MAX];
    if (!dladdr((void *)tlsouter_init, &info) || !info.dli_fname ||
        strlen(info.dli_fname) + 32 > sizeof path)
        return;
    strcpy(path, info.dli_fname);
    char *slash = strrchr(path, '/');
    strcpy(slash ? slash + 1 : path, "libgoshim_tlsie.so");
    inner = dlopen(path, RTLD_NOW);
    if (!inner)
        fprintf(stderr, "tlsouter: dlopen: %s\n", dlerror());
}

/* The handle of libgoshim_tlsie.so its constructor opened, or NULL. */
void *tlsouter_inner(void)
{
    return inner;
}

int tlsouter_get(void)
{
    return tlsouter_val;
}
