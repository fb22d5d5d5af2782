/*
 * fork_exec_wait: fork, the child points stdout at /dev/null and execs the static `hello`
 * program (/bench/hello), the parent waits for it.
 */
#include "lbench.h"

#include <fcntl.h>
#include <sys/wait.h>

/* One sample: fork, exec /bench/hello with stdout on `devnull`, wait. */
static uint64_t fork_exec_wait(int devnull)
{
	static char *const argv[] = { "hello", NULL };
	static char *const envp[] = { NULL };
	uint64_t t0 = lb_rdtsc();
	pid_t pid = fork();
	if (pid == 0) {
		dup2(devnull, 1);
		execve("/bench/hello", argv, envp);
		_exit(127);
	}
	if (pid < 0)
		lb_die("fork");
	int st;
	if (waitpid(pid, &st, 0) != pid)
		lb_die("waitpid");
	uint64_t t1 = lb_rdtsc();
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		lb_die("hello failed");
	return lb_sample(t0, t1);
}

int main(void)
{
	enum { RUNS = 51 };
	lb_init("forkexec");
	int devnull = open("/dev/null", O_WRONLY);
	if (devnull < 0)
		lb_die("open /dev/null");
	uint64_t *s = lb_samples(RUNS);
	for (int i = 0; i < 2; i++)
		fork_exec_wait(devnull);
	lb_begin("fork_exec_wait");
	for (int i = 0; i < RUNS; i++)
		s[i] = fork_exec_wait(devnull);
	lb_report("fork", "fork_exec_wait", s, RUNS);
	return 0;
}
