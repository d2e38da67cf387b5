/*
 * cov_work.c — coverage-overhead benchmark: two threads run a branchy computation (Collatz
 * trajectories) and meet at a lock every 1000 numbers, so most of the time is spent in
 * instrumented code between scheduling points. scripts/bench.sh runs it under dara plain and
 * built with sanitizer coverage, and reports the ratio.
 *
 * Usage: cov_work [N]   (numbers per thread, default 200000). Prints the checksum.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long total;
static long numbers = 200000;

static unsigned collatz(unsigned long n)
{
    unsigned steps = 0;
    while (n != 1) {
        if (n % 2 == 0)
            n /= 2;
        else
            n = 3 * n + 1;
        steps++;
    }
    return steps;
}

static void *work(void *arg)
{
    unsigned long base = (unsigned long)arg, local = 0;
    for (long i = 1; i <= numbers; i++) {
        local += collatz(base + (unsigned long)i);
        if (i % 1000 == 0) {
            pthread_mutex_lock(&lock);
            total += local;
            local = 0;
            pthread_mutex_unlock(&lock);
        }
    }
    pthread_mutex_lock(&lock);
    total += local;
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        numbers = atol(argv[1]);
    pthread_t a, b;
    pthread_create(&a, NULL, work, (void *)0UL);
    pthread_create(&b, NULL, work, (void *)1000000UL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("%lu\n", total);
    return 0;
}
