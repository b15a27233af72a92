/*
 * Running gnuplot for the launcher's charts: compare --out writes its
 * script to a file beside the data and runs it there (the user can edit
 * and rerun it); trace-plot feeds its script, data included, through a
 * pipe. gnuplot is optional: without it the launcher says how to install
 * it and does the rest of its work.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/gnuplot.h"
#include "tools/library.h"

#define GNUPLOT_HINT "sudo apt-get install gnuplot-nox"

/* gp_quote writes s as a gnuplot single-quoted string ('' stands for '). */
void gp_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        if (*s != '\n')
            fputc(*s, f);
    }
    fputc('\'', f);
}

/*
 * exec_gnuplot is run_gnuplot's child: gnuplot on script_file, or on its
 * stdin (fd) when script_file is NULL, in dir (NULL: here), its stdout
 * discarded. Never returns.
 */
__attribute__((noreturn)) static void exec_gnuplot(const char *who, const char *dir,
                                                   const char *script_file, int fd)
{
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

    if (null >= 0)
        dup2(null, STDOUT_FILENO);
    if (fd >= 0)
        dup2(fd, STDIN_FILENO);
    if (dir != NULL && chdir(dir) != 0) {
        fprintf(stderr, "%s: %s: %s\n", who, dir, strerror(errno));
        _exit(EXIT_NOEXEC);
    }
    execlp("gnuplot", "gnuplot", script_file != NULL ? script_file : "-", (char *)NULL);
    fprintf(stderr, "%s: gnuplot: %s\n", who, strerror(errno));
    _exit(EXIT_NOTFOUND);
}

/* feed_gnuplot writes text into fd and closes it: false if gnuplot did not take it all. */
static bool feed_gnuplot(int fd, const char *text, size_t len)
{
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    bool write_failed = false;

    sigaction(SIGPIPE, &ign, &old); /* gnuplot may stop reading early: EPIPE, not death */
    for (size_t off = 0; off < len && !write_failed;) {
        ssize_t n = write(fd, text + off, len - off);

        if (n < 0 && errno == EINTR)
            continue;
        write_failed = n <= 0;
        off += n > 0 ? (size_t)n : 0;
    }
    close(fd);
    sigaction(SIGPIPE, &old, NULL);
    return !write_failed;
}

/*
 * run_gnuplot runs gnuplot in dir (NULL: here) on script_file, or on
 * script_text through a pipe. PLOT_OK; PLOT_MISSING (said, with the
 * apt-get line); PLOT_FAILED (said; gnuplot's own message is above).
 */
int run_gnuplot(const char *who, const char *dir, const char *script_file, const char *script_text,
                size_t script_len)
{
    int fds[2] = {-1, -1}, status;
    bool write_failed = false;
    pid_t pid;

    if (!find_in_path("gnuplot")) {
        fprintf(stderr, "%s: gnuplot is not installed, so no PNG: install it with '%s'\n", who,
                GNUPLOT_HINT);
        return PLOT_MISSING;
    }
    if (script_text != NULL && pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(stderr, "%s: pipe: %s\n", who, strerror(errno));
        return PLOT_FAILED;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "%s: fork: %s\n", who, strerror(errno));
        if (fds[0] >= 0) {
            close(fds[0]);
            close(fds[1]);
        }
        return PLOT_FAILED;
    }
    if (pid == 0)
        exec_gnuplot(who, dir, script_file, fds[0]);
    if (script_text != NULL) {
        close(fds[0]);
        write_failed = !feed_gnuplot(fds[1], script_text, script_len);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || write_failed) {
        char sig[32];

        if (WIFEXITED(status))
            fprintf(stderr, "%s: gnuplot failed (exit status %d)\n", who, WEXITSTATUS(status));
        else
            fprintf(stderr, "%s: gnuplot was killed by %s\n", who,
                    sig_name(sig, sizeof sig, WTERMSIG(status)));
        return PLOT_FAILED;
    }
    return PLOT_OK;
}
