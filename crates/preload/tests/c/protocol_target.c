/* Target for crates/preload/tests/protocol.rs: touches each kind of scheduling point once,
 * without contention, and prints what it observed. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/auxv.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int counter;
static struct timespec worker_mono;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int once_runs;
static void once_init(void) { once_runs++; }

static void *worker(void *arg) {
    pthread_mutex_lock(&lock);
    counter += (int)(long)arg;
    pthread_mutex_unlock(&lock);
    clock_gettime(CLOCK_MONOTONIC, &worker_mono);
    return (void *)(long)(counter * 10);
}

static void hex(const char *label, const unsigned char *b, size_t n) {
    printf("%s ", label);
    for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc > 1) { /* "clone": a raw clone of a process sharing memory on a stack of its own
                       (not a fork, which dara makes; posix_spawn's kind, which dara refuses) */
        static char stack[16384];
        long pid = syscall(SYS_clone, (long)(CLONE_VM | SIGCHLD), (long)(stack + sizeof stack), 0L, 0L, 0L);
        printf("clone returned %ld\n", pid);
        return 0;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    printf("realtime %lld %09ld\n", (long long)ts.tv_sec, ts.tv_nsec);

    unsigned char buf[16];
    getrandom(buf, sizeof buf, 0);
    hex("getrandom", buf, sizeof buf);
    syscall(SYS_getrandom, buf, sizeof buf, 0);
    hex("raw-getrandom", buf, sizeof buf);
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0 || read(fd, buf, sizeof buf) != sizeof buf) return 20;
    close(fd);
    hex("urandom", buf, sizeof buf);
    hex("at-random", (const unsigned char *)getauxval(AT_RANDOM), 16);
    srand(42);
    int r1 = rand();
    srand(42);
    printf("srand-repeats %d\n", r1 == rand());

    pthread_t t;
    if (pthread_create(&t, NULL, worker, (void *)5) != 0) return 21;
    void *ret = NULL;
    if (pthread_join(t, &ret) != 0) return 22;
    printf("joined %ld\n", (long)ret);
    printf("worker-monotonic %lld %09ld\n", (long long)worker_mono.tv_sec, worker_mono.tv_nsec);

    struct timespec d = {2, 500};
    nanosleep(&d, NULL);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    printf("after-sleep %lld %09ld\n", (long long)ts.tv_sec, ts.tv_nsec);

    syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
    printf("raw-realtime %lld %09ld\n", (long long)ts.tv_sec, ts.tv_nsec);

    pthread_mutex_lock(&lock);
    struct timespec abs;
    clock_gettime(CLOCK_REALTIME, &abs);
    abs.tv_sec += 1;
    int rc = pthread_cond_timedwait(&cond, &lock, &abs);
    printf("cond-timedwait %d relock %d\n", rc == ETIMEDOUT, pthread_mutex_trylock(&lock) == EBUSY);
    pthread_mutex_unlock(&lock);

    pthread_rwlock_rdlock(&rw);
    pthread_rwlock_unlock(&rw);
    pthread_once(&once, once_init);
    pthread_once(&once, once_init);
    printf("once-runs %d\n", once_runs);

    sem_t sem;
    sem_init(&sem, 0, 1);
    int w = sem_wait(&sem);
    int tw = sem_trywait(&sem);
    printf("sem %d %d %d\n", w, tw, errno == EAGAIN);

    int word = 0;
    long waited = syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
    printf("futex-wait %ld %d\n", waited, errno == EAGAIN);
    long woken = syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    printf("futex-wake %ld\n", woken);

    printf("nprocs %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
    sched_yield();
    fflush(stdout);
    exit(3);
}
