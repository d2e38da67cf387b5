/*
 * atomic_counter.c — benchmark for `--preempt-on atomics` (scripts/bench-atomics-trap.sh): two
 * threads each add 1 to a shared C11 atomic counter N times (argv[1], default 1000) with
 * atomic_fetch_add (`lock xadd` on x86-64), then main checks the total. Built plainly (cc -O2):
 * under --preempt-on atomics every one of the 2N additions is a trapped instruction and, the
 * counter being watched, a scheduling point. With a second argument `yield`, each thread calls
 * sched_yield N times instead: as many scheduling points with no trap, the baseline of what a
 * trap adds.
 */
#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include <sched.h>
#include <string.h>

static atomic_long counter;
static long rounds = 1000;
static int yielding;

static void *add(void *arg)
{
    (void)arg;
    for (long i = 0; i < rounds; i++) {
        if (yielding)
            sched_yield();
        else
            atomic_fetch_add(&counter, 1);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        rounds = atol(argv[1]);
    yielding = argc > 2 && strcmp(argv[2], "yield") == 0;
    pthread_t a, b;
    pthread_create(&a, NULL, add, NULL);
    pthread_create(&b, NULL, add, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    assert(yielding || atomic_load(&counter) == 2 * rounds);
    printf("counter: %ld\n", atomic_load(&counter));
    return 0;
}
