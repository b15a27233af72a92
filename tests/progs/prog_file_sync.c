/*
 * One thread writes a file and fsyncs it while the main thread waits in pthread_join:
 * the fsync sleeps in the kernel (writeback) and nothing else runs.
 *
 *   prog_file_sync [MIB]      (default 16)
 *
 * The file is tmpfile()'s. Output: "synced MIB MiB"; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prog_check.h"

static long mib = 16;

static void *writer(void *arg)
{
    (void)arg;
    FILE *f = tmpfile();
    CHECK(f != NULL);
    int fd = fileno(f);
    size_t chunk = 1 << 20;
    char *buf = malloc(chunk);
    CHECK(buf != NULL);
    memset(buf, 'g', chunk);
    for (long m = 0; m < mib; m++)
        CHECK(pwrite(fd, buf, chunk, m * (off_t)chunk) == (ssize_t)chunk);
    CHECK(fsync(fd) == 0);
    CHECK(fclose(f) == 0);
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    mib = argc > 1 ? atol(argv[1]) : 16;
    if (mib < 1) {
        fprintf(stderr, "usage: prog_file_sync [MIB]\n");
        return 2;
    }
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, writer, NULL), 0);
    EXPECT(pthread_join(t, NULL), 0);
    printf("synced %ld MiB\n", mib);
    return 0;
}
