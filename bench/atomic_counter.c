/*
 * atomic_counter.c — benchmark for `--preempt-on atomics` (scripts/bench-atomics-trap.sh): two
 * threads each add 1 to a shared C11 atomic counter N times (argv[1], default 1000) with
 * atomic_fetch_add (`lock xadd` on x86-64), then main checks the total. Built plainly (cc -O2):
 * under --preempt-on atomics every one of the 2N additions is a trapped instruction and, the
 * counter being watched, a scheduling point.
 */
#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_long counter;
static long rounds = 1000;

static void *add(void *arg)
{
    (void)arg;
    for (long i = 0; i < rounds; i++)
        atomic_fetch_add(&counter, 1);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        rounds = atol(argv[1]);
    pthread_t a, b;
    pthread_create(&a, NULL, add, NULL);
    pthread_create(&b, NULL, add, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    assert(atomic_load(&counter) == 2 * rounds);
    printf("counter: %ld\n", atomic_load(&counter));
    return 0;
}
