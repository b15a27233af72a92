/*
 * pbench_echo_server: a thread-per-connection TCP echo server written the
 * legacy way goshim is for: one thread per connection, plain BLOCKING
 * accept, read and write, default thread attributes.
 *
 *   usage: pbench_echo_server PORTFILE NCONN
 *
 * Listens on 127.0.0.1 on an ephemeral port and writes that port, one line,
 * to PORTFILE (to PORTFILE.tmp first, then renamed, so a reader never sees
 * half of it). Accepts exactly NCONN connections, each served by its own
 * thread that echoes everything it reads until EOF; once NCONN connections
 * were accepted and all of them reached EOF, prints one line
 *   "server: conns=N peak_threads=T os_threads=O vmhwm_kb=K"
 * and exits 0. peak_threads is the program's own count of connection
 * threads alive at once, plus the main thread; os_threads is the kernel's
 * thread count of the process (Threads: in /proc/self/status) when the last
 * connection was accepted (under goshim: the OS threads carrying the tasks);
 * vmhwm_kb is the peak resident set (VmHWM). The client (pbench_echo_client)
 * spreads its connections over several source addresses, so one port is
 * enough for 30,000 connections.
 *
 * The program raises its own RLIMIT_NOFILE (soft to hard, and the hard
 * limit too when it is short and the process may: root).
 * Exit status: 0 done; 1 usage or set-up error; 2 a connection failed
 * (read or write error); 3 pthread_create failed, reported as
 *   "server: pthread_create failed after N threads: <strerror>"
 * (natively that happens near kernel.pid_max).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t all_done = PTHREAD_COND_INITIALIZER;
static long live, peak_live, finished, failed; /* protected by m */
static long nconn;

/* Raise RLIMIT_NOFILE to at least want descriptors (soft = hard, hard raised if short). */
static int raise_nofile(rlim_t want, const char *who)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        fprintf(stderr, "%s: getrlimit(RLIMIT_NOFILE): %s\n", who, strerror(errno));
        return -1;
    }
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) {
        struct rlimit up = {want, want};
        if (setrlimit(RLIMIT_NOFILE, &up) != 0) {
            fprintf(stderr,
                    "%s: need %llu file descriptors, the hard limit is %llu and raising it "
                    "failed: %s (run as root, or raise it with ulimit -Hn / fs.nr_open)\n",
                    who, (unsigned long long)want, (unsigned long long)rl.rlim_max,
                    strerror(errno));
            return -1;
        }
        return 0;
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= rl.rlim_max)
        return 0;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        fprintf(stderr, "%s: setrlimit(RLIMIT_NOFILE, soft=hard=%llu): %s\n", who,
                (unsigned long long)rl.rlim_max, strerror(errno));
        return -1;
    }
    return 0;
}

/* A number from /proc/self/status ("VmHWM:", "Threads:"), or -1. */
static long proc_status(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    char line[256];
    long v = -1;
    size_t k = strlen(key);
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, key, k) == 0) {
            v = atol(line + k);
            break;
        }
    fclose(f);
    return v;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void *serve(void *arg)
{
    int fd = (int)(long)arg;
    char buf[16384];
    int bad = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n == 0)
            break;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || write_all(fd, buf, (size_t)n) != 0) {
            bad = errno;
            break;
        }
    }
    close(fd);
    pthread_mutex_lock(&m);
    if (bad && failed++ < 3)
        fprintf(stderr, "server: connection: %s\n", strerror(bad));
    live--;
    if (++finished == nconn)
        pthread_cond_signal(&all_done);
    pthread_mutex_unlock(&m);
    return NULL;
}

/* A socket listening on 127.0.0.1 on an ephemeral port, its port in *port; -1 on error. */
static int listen_loopback(unsigned *port)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0) {
        fprintf(stderr, "server: socket: %s\n", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t salen = sizeof sa;
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 4096) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &salen) != 0) {
        fprintf(stderr, "server: bind/listen on 127.0.0.1: %s\n", strerror(errno));
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return lfd;
}

/* Writes the port to PORTFILE.tmp, then renames it to PORTFILE; -1 on error. */
static int publish_port(const char *portfile, unsigned port)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", portfile) >= (int)sizeof tmp) {
        fprintf(stderr, "server: PORTFILE name too long\n");
        return -1;
    }
    FILE *pf = fopen(tmp, "w");
    if (pf == NULL || fprintf(pf, "%u\n", port) < 0 || fclose(pf) != 0 ||
        rename(tmp, portfile) != 0) {
        fprintf(stderr, "server: writing %s: %s\n", portfile, strerror(errno));
        return -1;
    }
    return 0;
}

/* Accepts nconn connections, a detached serve thread each; -1 if accept
 * failed. Exits 3 if a thread cannot be created. */
static long accept_all(int lfd)
{
    long accepted = 0;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    while (accepted < nconn) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            fprintf(stderr, "server: accept after %ld connections: %s\n", accepted,
                    strerror(errno));
            return -1;
        }
        pthread_mutex_lock(&m);
        live++;
        if (live > peak_live)
            peak_live = live;
        pthread_mutex_unlock(&m);
        pthread_t t;
        int err = pthread_create(&t, &attr, serve, (void *)(long)fd);
        if (err != 0) {
            printf("server: pthread_create failed after %ld threads: %s\n", accepted,
                   strerror(err));
            fflush(stdout);
            _exit(3); /* the other threads are still blocked in read */
        }
        accepted++;
    }
    return accepted;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (nconn = atol(argv[2])) < 1) {
        fprintf(stderr, "usage: %s PORTFILE NCONN\n", argv[0]);
        return 1;
    }
    const char *portfile = argv[1];
    if (raise_nofile((rlim_t)nconn + 64, "server") != 0)
        return 1;
    unsigned port;
    int lfd = listen_loopback(&port);
    if (lfd < 0 || publish_port(portfile, port) != 0)
        return 1;
    long accepted = accept_all(lfd);
    if (accepted < 0)
        return 1;
    long os_threads = proc_status("Threads:");
    close(lfd);

    pthread_mutex_lock(&m);
    while (finished < nconn)
        pthread_cond_wait(&all_done, &m);
    long peak = peak_live, bad = failed;
    pthread_mutex_unlock(&m);
    printf("server: conns=%ld peak_threads=%ld os_threads=%ld vmhwm_kb=%ld\n", accepted, peak + 1,
           os_threads, proc_status("VmHWM:"));
    if (bad) {
        fprintf(stderr, "server: %ld connections failed\n", bad);
        return 2;
    }
    return 0;
}
