/*
 * What the stack tests share (test_stack.c, test_stack_overflow.c): the page size, the
 * process's mapping count, a child run with its stderr captured, and an address a child
 * writes to fault.
 */
#ifndef GOSHIM_TESTS_STACK_HELPERS_H
#define GOSHIM_TESTS_STACK_HELPERS_H

#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static inline size_t page(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/*
 * run_child runs fn in a forked child whose stderr goes to out (NUL-ended)
 * and whose core dumps are off; returns the wait status.
 */
static inline int run_child(void (*fn)(void), char *out, size_t outlen)
{
    int p[2];
    cr_assert(pipe(p) == 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        close(p[0]);
        dup2(p[1], 2);
        fn();
        _exit(99);
    }
    close(p[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < outlen && (n = read(p[0], out + got, outlen - 1 - got)) > 0)
        got += (size_t)n;
    out[got] = '\0';
    close(p[0]);
    int status;
    cr_assert(waitpid(pid, &status, 0) == pid);
    return status;
}

static inline int count_substr(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static inline long maps_lines(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    long n = 0;
    int c;
    cr_assert(f != NULL);
    while ((c = getc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

/* The address touch_fault_addr writes in a child (run_child), to show a guard faults. */
static volatile char *fault_addr;

static inline void touch_fault_addr(void)
{
    *fault_addr = 1;
    write(2, "survived\n", 9);
}

#endif
