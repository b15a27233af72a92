/*
 * What open() makes, used the way programs use it: goshim takes it for a file without a
 * look (no fstat, no F_GETFL: netpoll_opened) and must still treat a FIFO opened by path
 * as a FIFO wherever that shows.
 *
 *   prog_opened_kinds [many N]
 *
 * Output, in this order:
 *   file: read 12 bytes: opened kinds      (a regular file, read on another thread)
 *   dup: read 6 bytes: kinds\n             (a dup of it, read on, same offset)
 *   fifo poll empty: 0                     (poll of an empty FIFO times out)
 *   fifo poll after write: 1 (in)
 *   fifo read: 4 bytes: fifo
 *   fifo nonblocking read: EAGAIN          (O_NONBLOCK set with fcntl)
 *   fifo blocked reader: 5 bytes: later    (a reader blocked in read() before the write)
 *
 * The blocked reader waits in read() on a FIFO opened by path while main computes and
 * then writes: with one P (GOSHIM_PROCS=1) the reader, blocked in the kernel, must not
 * hold it.
 *
 * many N: N files made, then each opened, read on another thread and closed, as a
 * program that searches a tree does. Output: "many: N files read". Its GOSHIM_STATS line
 * says how many descriptors goshim classified (fds_classified): not these.
 *
 * exit 0; an error is reported on stderr with exit 1.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void die(const char *what)
{
    fprintf(stderr, "prog_opened_kinds: %s: %s\n", what, strerror(errno));
    exit(1);
}

struct rd {
    int fd;
    size_t want;
    char buf[64];
    ssize_t n;
};

static void *reader(void *arg)
{
    struct rd *r = arg;
    r->n = read(r->fd, r->buf, r->want);
    return NULL;
}

/* read on a thread of its own, joined */
static ssize_t read_on_thread(int fd, char *out, size_t want)
{
    struct rd r = {.fd = fd, .want = want};
    pthread_t t;
    if (pthread_create(&t, NULL, reader, &r) != 0 || pthread_join(t, NULL) != 0)
        die("pthread");
    memcpy(out, r.buf, sizeof r.buf);
    return r.n;
}

static volatile unsigned long sink;

static int many(const char *dir, int n)
{
    char path[256], buf[64];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/goshim-opened-%d-%d", dir, (int)getpid(), i);
        int w = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (w < 0 || write(w, "many\n", 5) != 5 || close(w) != 0)
            die(path);
    }
    int got = 0;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/goshim-opened-%d-%d", dir, (int)getpid(), i);
        int f = open(path, O_RDONLY);
        if (f < 0)
            die(path);
        got += read_on_thread(f, buf, sizeof buf) == 5;
        close(f);
        unlink(path);
    }
    printf("many: %d files read\n", got);
    return got == n ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    if (argc == 3 && !strcmp(argv[1], "many"))
        return many(dir, atoi(argv[2]));
    char path[256], fifo[256], buf[64];
    snprintf(path, sizeof path, "%s/goshim-opened-%d", dir, (int)getpid());
    snprintf(fifo, sizeof fifo, "%s/goshim-opened-fifo-%d", dir, (int)getpid());

    /* A regular file, and a dup of it. */
    int w = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (w < 0 || write(w, "opened kinds\n", 13) != 13 || close(w) != 0)
        die(path);
    int f = open(path, O_RDONLY);
    if (f < 0)
        die(path);
    unlink(path);
    memset(buf, 0, sizeof buf);
    ssize_t n = read_on_thread(f, buf, 12);
    printf("file: read %zd bytes: %.*s\n", n, (int)(n > 0 ? n : 0), buf);
    int d = dup(f);
    if (d < 0 || lseek(f, 7, SEEK_SET) != 7)
        die("dup");
    memset(buf, 0, sizeof buf);
    n = read_on_thread(d, buf, sizeof buf - 1);
    printf("dup: read %zd bytes: %s", n, buf);
    close(d);
    close(f);

    /* A FIFO opened by path (O_RDWR: the open does not wait for a writer). */
    unlink(fifo);
    if (mkfifo(fifo, 0600) != 0)
        die("mkfifo");
    int q = open(fifo, O_RDWR);
    if (q < 0)
        die(fifo);
    struct pollfd p = {.fd = q, .events = POLLIN};
    printf("fifo poll empty: %d\n", poll(&p, 1, 50));
    if (write(q, "fifo", 4) != 4)
        die("write");
    p.revents = 0;
    int pr = poll(&p, 1, 5000);
    printf("fifo poll after write: %d%s\n", pr, p.revents & POLLIN ? " (in)" : "");
    memset(buf, 0, sizeof buf);
    n = read_on_thread(q, buf, sizeof buf - 1);
    printf("fifo read: %zd bytes: %s\n", n, buf);
    int fl = fcntl(q, F_GETFL);
    if (fl < 0 || fcntl(q, F_SETFL, fl | O_NONBLOCK) != 0)
        die("fcntl");
    n = read(q, buf, sizeof buf);
    printf("fifo nonblocking read: %s\n", n < 0 && errno == EAGAIN ? "EAGAIN" : "not EAGAIN");
    close(q);

    /* A reader blocked in read() on a FIFO opened by path, before anything is written. */
    int r = open(fifo, O_RDWR);
    if (r < 0)
        die(fifo);
    struct rd rd = {.fd = r, .want = 5};
    pthread_t t;
    if (pthread_create(&t, NULL, reader, &rd) != 0)
        die("pthread_create");
    for (unsigned long i = 0; i < 50000000; i++) /* the reader blocks meanwhile */
        sink += i;
    if (write(r, "later", 5) != 5)
        die("write");
    pthread_join(t, NULL);
    printf("fifo blocked reader: %zd bytes: %.*s\n", rd.n, (int)(rd.n > 0 ? rd.n : 0), rd.buf);
    close(r);
    unlink(fifo);
    return 0;
}
