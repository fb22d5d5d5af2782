/*
 * fork_exit_wait_<size>: fork, the child calls _exit(0) at once, the parent waits for it.
 * Usage: fork <MiB>. With 0 the parent is a minimal static process (`hello`); otherwise it
 * first maps <MiB> MiB of private anonymous memory and writes one byte to every 4 KiB page, so
 * fork has that many present pages to share copy-on-write.
 */
#include "lbench.h"

#include <sys/mman.h>
#include <sys/wait.h>

/* One sample: fork, the child exits at once, the parent reaps it. */
static uint64_t fork_exit_wait(void)
{
	uint64_t t0 = lb_rdtsc();
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	if (pid < 0)
		lb_die("fork");
	int st;
	if (waitpid(pid, &st, 0) != pid)
		lb_die("waitpid");
	uint64_t t1 = lb_rdtsc();
	return lb_sample(t0, t1);
}

int main(int argc, char **argv)
{
	size_t mib = lb_arg_mib(argc, argv);
	int runs = mib >= 100 ? 11 : mib >= 10 ? 21 : 51;
	char metric[64];
	if (mib == 0)
		snprintf(metric, sizeof metric, "fork_exit_wait_hello");
	else
		snprintf(metric, sizeof metric, "fork_exit_wait_%zumb", mib);
	lb_init("fork");
	if (mib > 0) {
		size_t bytes = mib << 20;
		char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			       0);
		if (p == MAP_FAILED)
			lb_die("mmap");
		for (size_t off = 0; off < bytes; off += 4096)
			p[off] = 1;
	}
	uint64_t *s = lb_samples(runs);
	for (int i = 0; i < 2; i++)
		fork_exit_wait();
	lb_begin(metric);
	for (int i = 0; i < runs; i++)
		s[i] = fork_exit_wait();
	lb_report("fork", metric, s, runs);
	return 0;
}
