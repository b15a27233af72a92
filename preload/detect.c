/*
 * Programs goshim cannot run, recognised at start-up so that it stays off
 * and the program runs natively (one line on stderr says why):
 *
 *   - a Go runtime in the process (a cgo binary, or a Go shared library):
 *     Go's own scheduler makes its threads with clone and keeps its own
 *     state in their TLS; its cgo calls would land on goshim's Gs. Found
 *     by the Go build-ID note (owner "Go", type 4) that Go's linker puts in
 *     a PT_NOTE segment of every ELF it writes.
 *   - an object that imports clone or clone3 but not pthread_create: it
 *     makes its threads itself, and a thread made that way inherits the
 *     M's GS base (and, without CLONE_SETTLS, the G's TCB), so it would
 *     run goshim's code as if it were that M or G. Found as undefined

 *     both (stress-ng: clone for processes, pthreads for threads) is run.
 *
 * Read with dl_iterate_phdr from the constructor (never from a signal
 * handler). Libraries loaded later with dlopen are not checked.
 */
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "preload/detect.h"

enum { GO_NOTE_BUILDID = 4 };

struct finding {
    char why[512];
};

static bool has_go_note(const struct dl_phdr_info *info)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr);
        const char *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *n = (const void *)p;
            size_t name = (n->n_namesz + 3) & ~3u, desc = (n->n_descsz + 3) & ~3u;
            const char *nm = p + sizeof *n;
            if (nm + name + desc > end)
                break;
            if (n->n_type == GO_NOTE_BUILDID && n->n_namesz == 3 && !memcmp(nm, "Go", 3))
                return true;
            p = nm + name + desc;
        }
    }
    return false;
}

/*
 * The number of dynamic symbols, from a GNU hash table: one past the
 * highest index a bucket's chain reaches (the undefined symbols, which are
 * not hashed, come before symoffset).
 */
static size_t gnu_hash_count(const uint32_t *h)
{
    uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2];
    const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(h + 4) + bloom_size);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t last = 0;
    for (uint32_t b = 0; b < nbuckets; b++)
        if (buckets[b] > last)
            last = buckets[b];
    if (last < symoffset)
        return symoffset;
    while (!(chain[last - symoffset] & 1))
        last++;
    return (size_t)last + 1;
}

/* Which of clone/__clone/clone3 (bit 0) and pthread_create (bit 1) the object imports. */
enum { IMP_CLONE = 1, IMP_PTHREAD_CREATE = 2 };

static unsigned imports(const struct dl_phdr_info *info, const char **clone_name)
{
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const void *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn)
        return 0;
    const ElfW(Sym) *sym = NULL;
    const char *str = NULL;
    const uint32_t *hash = NULL, *gnu_hash = NULL;
    size_t strsz = 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        /* ld.so has relocated these d_ptr values in place, except in
         * objects it maps read-only (the vDSO): add the base then. */
        uintptr_t ptr = dyn->d_un.d_ptr;
        if (ptr < info->dlpi_addr)
            ptr += info->dlpi_addr;
        if (dyn->d_tag == DT_SYMTAB)
            sym = (const void *)ptr;
        else if (dyn->d_tag == DT_STRTAB)
            str = (const void *)ptr;
        else if (dyn->d_tag == DT_STRSZ)
            strsz = dyn->d_un.d_val;
        else if (dyn->d_tag == DT_HASH)
            hash = (const void *)ptr;
        else if (dyn->d_tag == DT_GNU_HASH)
            gnu_hash = (const void *)ptr;
    }
    if (!sym || !str)
        return 0;
    size_t n = hash ? hash[1] : gnu_hash ? gnu_hash_count(gnu_hash) : 0;
    if (n > (1u << 20))
        return 0;
    unsigned found = 0;
    for (size_t i = 1; i < n; i++) {
        if (sym[i].st_shndx != SHN_UNDEF || sym[i].st_name >= strsz)
            continue;
        const char *name = str + sym[i].st_name;
        if (!strcmp(name, "clone") || !strcmp(name, "__clone") || !strcmp(name, "clone3")) {
            found |= IMP_CLONE;
            *clone_name = name;
        } else if (!strcmp(name, "pthread_create")) {
            found |= IMP_PTHREAD_CREATE;
        }
    }
    return found;
}

static int check_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct finding *f = arg;
    const char *path = info->dlpi_name && *info->dlpi_name ? info->dlpi_name : "the program";
    if (has_go_note(info)) {
        snprintf(f->why, sizeof f->why, "%s contains a Go runtime (cgo)", path);
        return 1;
    }
    /* libc defines clone; it does not import it. */
    const char *name = NULL;
    if (imports(info, &name) == IMP_CLONE) {
        snprintf(f->why, sizeof f->why,
                 "%s makes its threads with %s(), not pthread_create (such threads cannot run "
                 "beside goshim)",
                 path, name);
        return 1;
    }
    return 0;
}

bool goshim_unsupported(char *why, size_t len)
{
    struct finding f = {{0}};
    if (dl_iterate_phdr(check_object, &f) == 0)
        return false;
    snprintf(why, len, "%s", f.why);
    return true;
}
