/* null_syscall: one getppid system call, issued directly with the `syscall` instruction. */
#include "lbench.h"

#include <sys/syscall.h>

static inline long raw_getppid(void)
{
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_getppid) : "rcx", "r11", "memory");
	return ret;
}

int main(void)
{
	enum { RUNS = 1001, WARMUP = 100 };
	lb_init("syscall");
	uint64_t *s = lb_samples(RUNS);
	for (int i = 0; i < WARMUP; i++)
		raw_getppid();
	lb_begin("null_syscall");
	for (int i = 0; i < RUNS; i++) {
		uint64_t t0 = lb_rdtsc();
		raw_getppid();
		uint64_t t1 = lb_rdtsc();
		s[i] = lb_sample(t0, t1);
	}
	lb_report("syscall", "null_syscall", s, RUNS);
	return 0;
}
