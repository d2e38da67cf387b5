/*
 * spawn_loop.c — baseline for executions per second: fork+exec+wait a program N times.
 *
 * Usage: spawn_loop N PROGRAM [ARGS...]. Output of the program goes to /dev/null. Prints one line
 * `spawn_per_sec <value>`, timed with CLOCK_MONOTONIC around the loop. This is the rate dara's
 * search loop is compared with (scripts/bench.sh): the cost of starting the same binary the same
 * number of times without dara.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s N PROGRAM [ARGS...]\n", argv[0]);
        return 2;
    }
    long n = atol(argv[1]);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            int null = open("/dev/null", O_WRONLY);
            dup2(null, 1);
            dup2(null, 2);
            execv(argv[2], argv + 2);
            _exit(127);
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "spawn_loop: run %ld failed\n", i);
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    printf("spawn_per_sec %.1f\n", n / secs);
    return 0;
}
