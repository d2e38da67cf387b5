/*
 * mem_private_work.c — benchmark for memory-level preemption's shared-address filter
 * (scripts/bench-memory.sh): each of two threads fills and sums its own heap array (memory no
 * other thread touches), then adds its sum to a shared total under a mutex. Only `total` is
 * shared and written, so with the filter one granule is watched; `--preempt-on memory:all`
 * watches every granule the profile saw and makes every array access a scheduling point.
 * The arrays are freed by main after the joins: freed inside the threads, the second thread's
 * malloc would reuse the first one's chunk, and the profile would (rightly, by address) count
 * every array granule as shared and written.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define N 256

static long total;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *work(void *arg)
{
    long seed = (long)arg;
    long *a = malloc(N * sizeof *a);
    if (a == NULL)
        return NULL;
    for (int i = 0; i < N; i++)
        a[i] = seed * i;
    long sum = 0;
    for (int i = 0; i < N; i++)
        sum += a[i];
    pthread_mutex_lock(&lock);
    total += sum;
    pthread_mutex_unlock(&lock);
    return a;
}

int main(void)
{
    pthread_t a, b;
    pthread_create(&a, NULL, work, (void *)1L);
    pthread_create(&b, NULL, work, (void *)2L);
    void *ra, *rb;
    pthread_join(a, &ra);
    pthread_join(b, &rb);
    free(ra);
    free(rb);
    printf("%ld\n", total);
    return total == 3L * (N - 1) * N / 2 ? 0 : 1;
}
