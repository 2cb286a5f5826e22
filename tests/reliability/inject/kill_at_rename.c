/* Fault injection for a test's child processes: a real SIGKILL at the rename that would
 * publish one file, whichever process (a Spark JVM included) makes it.
 *
 * Never part of aqueduct: a test compiles this with the system's C compiler and puts it in
 * LD_PRELOAD of the process it starts (tests/reliability/injection.py, kill_at_rename_env).
 * Every rename(2)-family call naming AQUEDUCT_TEST_KILL_AT_RENAME as its target first appends
 * "<target> <pid>" to AQUEDUCT_TEST_FAULT_MARK, then SIGKILLs the calling process: the new
 * content is on disk under its temporary name and never published, as a crash at that moment
 * would leave it. Every other call goes straight to the C library.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void kill_if_target(const char *newpath) {
    const char *target = getenv("AQUEDUCT_TEST_KILL_AT_RENAME");
    if (target == NULL || newpath == NULL || strcmp(target, newpath) != 0) return;
    const char *mark = getenv("AQUEDUCT_TEST_FAULT_MARK");
    if (mark != NULL) {
        int fd = open(mark, O_WRONLY | O_APPEND | O_CREAT, 0644);
        if (fd >= 0) {
            dprintf(fd, "rename:%s %d\n", target, (int)getpid());
            fsync(fd);
            close(fd);
        }
    }
    kill(getpid(), SIGKILL);
}

int rename(const char *oldpath, const char *newpath) {
    static int (*real)(const char *, const char *);
    if (real == NULL) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    kill_if_target(newpath);
    return real(oldpath, newpath);
}

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
    static int (*real)(int, const char *, int, const char *);
    if (real == NULL) real = (int (*)(int, const char *, int, const char *))dlsym(RTLD_NEXT, "renameat");
    kill_if_target(newpath);
    return real(olddirfd, oldpath, newdirfd, newpath);
}

int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    static int (*real)(int, const char *, int, const char *, unsigned int);
    if (real == NULL) real = (int (*)(int, const char *, int, const char *, unsigned int))dlsym(RTLD_NEXT, "renameat2");
    kill_if_target(newpath);
    return real(olddirfd, oldpath, newdirfd, newpath, flags);
}
