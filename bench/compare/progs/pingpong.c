/* pingpong: the vCPU placement probe of bench/compare. Two threads pinned to
 * CPUs 0 and 1 bounce one cache line (a counter each side increments in turn)
 * and it prints the fastest batch's mean round trip in nanoseconds over
 * BATCHES batches of ROUNDS round trips, and the median batch's:
 *   pingpong [ROUNDS [BATCHES]]      -> "rtt_ns 27.4 median_ns 29.0"
 * The fastest batch is the placement: on a loaded machine most batches
 * include a preemption of one thread, none can beat the hardware. It stops
 * after half a second once it has 5 batches (spinning threads on a loaded
 * machine are slow to finish, and they load it further).
 * On this host the hypervisor moves the two vCPUs between a near placement
 * (~25 ns, sibling hyperthreads or one core's caches) and a far one (~170 ns),
 * which changes shared-memory latencies 3x; the probe says which one a run had.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) volatile long line[8];
static long rounds = 2000;
static volatile int stop; /* set by main when its time is up, by pong if it cannot run */

static int pin(int cpu) {
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* pong waits for each odd value and answers with the next even one. */
static void *pong(void *arg) {
	long batches = (long)arg;
	if (pin(1) != 0) {
		__atomic_store_n(&stop, 1, __ATOMIC_RELEASE); /* main must not wait */
		return (void *)1;
	}
	for (long b = 0; b < batches; b++)
		for (long i = 0; i < rounds; i++) {
			long want = 2 * (b * rounds + i) + 1;
			while (__atomic_load_n(&line[0], __ATOMIC_ACQUIRE) != want)
				if (__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) return NULL;
			__atomic_store_n(&line[0], want + 1, __ATOMIC_RELEASE);
		}
	return NULL;
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	long batches = 101;
	if (argc > 1) rounds = atol(argv[1]);
	if (argc > 2) batches = atol(argv[2]);
	if (rounds < 1 || batches < 1 || batches > 101) {
		fprintf(stderr, "usage: pingpong [ROUNDS [BATCHES<=101]]\n");
		return 2;
	}
	if (pin(0) != 0) {
		fprintf(stderr, "pingpong: cannot pin to CPU 0\n");
		return 1;
	}
	pthread_t t;
	if (pthread_create(&t, NULL, pong, (void *)batches) != 0) return 1;
	double rtt[101], start = now();
	long b;
	for (b = 0; b < batches; b++) {
		if (b >= 5 && now() - start > 0.5e9) break;
		double t0 = now();
		for (long i = 0; i < rounds; i++) {
			long v = 2 * (b * rounds + i);
			__atomic_store_n(&line[0], v + 1, __ATOMIC_RELEASE);
			while (__atomic_load_n(&line[0], __ATOMIC_ACQUIRE) != v + 2)
				if (__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) goto done;
		}
		rtt[b] = (now() - t0) / rounds;
	}
done:
	batches = b;
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	void *ret;
	pthread_join(t, &ret);
	if (ret != NULL) {
		fprintf(stderr, "pingpong: cannot pin to CPU 1\n");
		return 1;
	}
	qsort(rtt, batches, sizeof rtt[0], cmp);
	printf("rtt_ns %.1f median_ns %.1f\n", rtt[0], rtt[batches / 2]);
	return 0;
}
