/*
 * futex_pingpong.c — baseline: bare futex handoff between two threads on ONE core.
 *
 * Two threads pinned to the same CPU (argv[2], default 0) pass a token back
 * and forth N round trips (argv[1], default 200000) through two futex words
 * with raw FUTEX_WAIT_PRIVATE / FUTEX_WAKE_PRIVATE. With both threads on one
 * core the waiter is always asleep when woken, so each handoff costs one wake
 * plus one context switch: the physical floor a dara scheduling point (one
 * thread stops, another is granted) is compared against (DESIGN.md 4).
 *
 * Output: one line `futex_roundtrip_ns <ns per round trip>` (two handoffs per
 * round trip), timed with CLOCK_MONOTONIC around the loop only.
 * Exit: 0; 2 on bad arguments or when pinning fails.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int ping;                             /* 1: token is with pong */
static int pong;                             /* 1: token is back with ping */
static long rounds;

static void futex_wait(int *word, int val)
{
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(int *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Wait until *word == 1, then reset it to 0. */
static void take(int *word)
{
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == 0)
        futex_wait(word, 0);
    __atomic_store_n(word, 0, __ATOMIC_RELAXED);
}

/* Set *word = 1 and wake its waiter. */
static void give(int *word)
{
    __atomic_store_n(word, 1, __ATOMIC_RELEASE);
    futex_wake(word);
}

static int pin(pthread_t t, int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(t, sizeof set, &set);
}

static void *ponger(void *arg)
{
    (void)arg;
    for (long i = 0; i < rounds; i++) {
        take(&ping);
        give(&pong);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    rounds = argc > 1 ? atol(argv[1]) : 200000;
    int cpu = argc > 2 ? atoi(argv[2]) : 0;
    if (rounds <= 0 || cpu < 0 || cpu >= CPU_SETSIZE)
        return 2;

    /* Pin main first so the new thread inherits the mask, then pin it too. */
    if (pin(pthread_self(), cpu) != 0) {
        fprintf(stderr, "futex_pingpong: cannot pin to cpu %d\n", cpu);
        return 2;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, ponger, NULL) != 0 || pin(t, cpu) != 0)
        return 2;

    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < rounds; i++) {
        give(&ping);
        take(&pong);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    pthread_join(t, NULL);

    double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    printf("futex_roundtrip_ns %.0f\n", ns / (double)rounds);
    return 0;
}
