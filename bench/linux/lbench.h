/*
 * lbench.h: what every Linux-guest benchmark program shares.
 *
 * Under QEMU's `-icount shift=0,sleep=off` the guest TSC advances by exactly one per guest
 * instruction, so an RDTSC pair around a piece of work counts the instructions it executed.
 * Each sample is (t1 - t0 - pair overhead), where the pair overhead is the median of empty
 * pairs measured by lb_init(). Results are printed as one machine-readable line per metric:
 *
 *   LBENCH {"group":"fork","metric":"fork_exit_wait_1mb","unit":"insns","median":..,...}
 *
 * A metric whose timed loop does nothing but the measured operation is preceded by
 * `LBEGIN <metric>`; the host timestamps both lines to derive a (noisy) wall time per
 * operation. Metrics whose loop also does untimed setup print no LBEGIN.
 */
#ifndef LBENCH_H
#define LBENCH_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Reads the time-stamp counter (guest instructions under icount). */
static inline uint64_t lb_rdtsc(void)
{
	uint32_t lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi) : : "memory");
	return ((uint64_t)hi << 32) | lo;
}

/* Median of empty RDTSC pairs, subtracted from every sample. */
static uint64_t lb_overhead;

/* Prints the program's failure and exits with status 1. */
static inline void lb_die(const char *what)
{
	fprintf(stderr, "LERROR %s\n", what);
	perror(what);
	exit(1);
}

static int lb_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* Allocates room for `runs` samples. */
static inline uint64_t *lb_samples(int runs)
{
	uint64_t *s = calloc((size_t)runs, sizeof *s);
	if (!s)
		lb_die("calloc");
	return s;
}

/* Converts a raw RDTSC pair into a sample, removing the pair's own cost. */
static inline uint64_t lb_sample(uint64_t t0, uint64_t t1)
{
	uint64_t d = t1 - t0;
	return d > lb_overhead ? d - lb_overhead : 0;
}

/*
 * Sorts the samples and prints the LBENCH line. `runs` should be odd so the median is one of
 * the samples.
 */
static inline void lb_report(const char *group, const char *metric, uint64_t *s, int runs)
{
	qsort(s, (size_t)runs, sizeof *s, lb_cmp_u64);
	printf("LBENCH {\"group\":\"%s\",\"metric\":\"%s\",\"unit\":\"insns\","
	       "\"median\":%llu,\"min\":%llu,\"max\":%llu,\"runs\":%d}\n",
	       group, metric, (unsigned long long)s[runs / 2], (unsigned long long)s[0],
	       (unsigned long long)s[runs - 1], runs);
	fflush(stdout);
}

/* Announces a timed loop that does nothing but the measured operation (for wall time). */
static inline void lb_begin(const char *metric)
{
	printf("LBEGIN %s\n", metric);
	fflush(stdout);
}

/* Measures the RDTSC pair overhead; call once before any measurement. */
static inline void lb_init(const char *program)
{
	enum { N = 101 };
	uint64_t s[N];
	for (int i = 0; i < N; i++) {
		uint64_t t0 = lb_rdtsc();
		uint64_t t1 = lb_rdtsc();
		s[i] = t1 - t0;
	}
	qsort(s, N, sizeof *s, lb_cmp_u64);
	lb_overhead = s[N / 2];
	printf("LINFO %s rdtsc_pair_overhead=%llu\n", program, (unsigned long long)lb_overhead);
	fflush(stdout);
}

/* Copies `bytes` (a multiple of 8) with `rep movsq`: the copy primitive of every baseline. */
static inline void lb_copy_movsq(void *dst, const void *src, size_t bytes)
{
	size_t n = bytes / 8;
	__asm__ volatile("rep movsq" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}

/* Parses a non-negative size in MiB from argv, or exits. */
static inline size_t lb_arg_mib(int argc, char **argv)
{
	if (argc != 2)
		lb_die("usage: <program> <MiB>");
	char *end;
	unsigned long v = strtoul(argv[1], &end, 10);
	if (*end != '\0')
		lb_die("size in MiB expected");
	return (size_t)v;
}

#endif
