/*
 * set*id from a thread while other threads run and wait: glibc makes every
 * OS thread of the process take the new credentials (SIGSETXID). As root,
 * a thread switches the process to group 1 and every OS thread in
 * /proc/self/task must show it; otherwise it sets the group it already has
 * (the call must still return).
 *
 * Output: "setresgid from a thread: every OS thread has the new gid" or
 * "setgid to the same group: returned"; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile int stop;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void *busy(void *arg)
{
    (void)arg;
    while (!stop)
        sched_yield();
    return NULL;
}

static void *parked(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    while (!stop)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return NULL;
}

/* Whether every task of this process has real, effective and saved gid want. */
static int all_tasks_have_gid(gid_t want)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int ok = d != NULL, n = 0;
    while (d && (e = readdir(d))) {
        char path[300], line[256];
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* ended meanwhile */
        while (fgets(line, sizeof line, f)) {
            unsigned r, ef, s;
            if (sscanf(line, "Gid: %u %u %u", &r, &ef, &s) == 3) {
                ok &= r == want && ef == want && s == want;
                n++;
            }
        }
        fclose(f);
    }
    if (d)
        closedir(d);
    return ok && n > 1;
}

static void *changer(void *arg)
{
    (void)arg;
    if (geteuid() == 0) {
        if (setresgid(1, 1, 1) != 0) {
            perror("setresgid");
            exit(1);
        }
        printf("setresgid from a thread: %s\n", all_tasks_have_gid(1)
                                                    ? "every OS thread has the new gid"
                                                    : "SOME OS THREAD KEPT THE OLD GID");
    } else {
        if (setgid(getgid()) != 0) {
            perror("setgid");
            exit(1);
        }
        printf("setgid to the same group: returned\n");
    }
    return NULL;
}

int main(void)
{
    pthread_t b[3], p[3], c;
    for (int i = 0; i < 3; i++) {
        pthread_create(&b[i], NULL, busy, NULL);
        pthread_create(&p[i], NULL, parked, NULL);
    }
    pthread_create(&c, NULL, changer, NULL);
    pthread_join(c, NULL);
    pthread_mutex_lock(&mu);
    stop = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < 3; i++) {
        pthread_join(b[i], NULL);
        pthread_join(p[i], NULL);
    }
    return 0;
}
