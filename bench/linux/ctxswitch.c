/*
 * pipe_pingpong_roundtrip: a parent and a child pass one byte back and forth over two pipes;
 * one sample is the parent's write + read, i.e. two process context switches.
 */
#include "lbench.h"

#include <sys/wait.h>

int main(void)
{
	enum { RUNS = 201, WARMUP = 20 };
	int to_child[2], to_parent[2];
	lb_init("ctxswitch");
	if (pipe(to_child) || pipe(to_parent))
		lb_die("pipe");
	pid_t pid = fork();
	if (pid < 0)
		lb_die("fork");
	if (pid == 0) {
		char c;
		close(to_child[1]);
		close(to_parent[0]);
		while (read(to_child[0], &c, 1) == 1)
			if (write(to_parent[1], &c, 1) != 1)
				_exit(2);
		_exit(0);
	}
	close(to_child[0]);
	close(to_parent[1]);
	uint64_t *s = lb_samples(RUNS);
	char c = 'x';
	for (int i = 0; i < WARMUP; i++)
		if (write(to_child[1], &c, 1) != 1 || read(to_parent[0], &c, 1) != 1)
			lb_die("warmup");
	lb_begin("pipe_pingpong_roundtrip");
	for (int i = 0; i < RUNS; i++) {
		uint64_t t0 = lb_rdtsc();
		if (write(to_child[1], &c, 1) != 1 || read(to_parent[0], &c, 1) != 1)
			lb_die("pingpong");
		uint64_t t1 = lb_rdtsc();
		s[i] = lb_sample(t0, t1);
	}
	lb_report("ctxswitch", "pipe_pingpong_roundtrip", s, RUNS);
	close(to_child[1]);
	int st;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		lb_die("child");
	return 0;
}
