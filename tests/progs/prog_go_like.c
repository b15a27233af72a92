/*
 * Programs goshim must leave alone (preload/detect.c): it stays off, says
 * so in one line on stderr, and the program runs natively.
 *
 * prog_go_like carries a Go build-ID note, as every binary Go's linker
 * writes (a cgo program does), and runs a pthread and joins it.
 * Output: "go-like program ran: 42"; exit 0.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

/* What Go's linker writes in .note.go.buildid (owner "Go", type 4). */
struct go_note {
    uint32_t namesz, descsz, type;
    char name[4];
    char desc[8];
};
__attribute__((section(".note.go.buildid"), aligned(4),
               used)) static const struct go_note go_buildid = {3, 8, 4, "Go", "goshimgo"};

static int result;

static void *thread_fn(void *arg)
{
    result = (int)(intptr_t)arg;
    return NULL;
}

int main(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, thread_fn, (void *)42) != 0 || pthread_join(t, NULL) != 0)
        return 1;
    printf("go-like program ran: %d\n", result);
    return 0;
}
