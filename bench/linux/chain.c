/*
 * chain_abcba_1k: a NightCore-like function chain, one process per function. A sends 1 KiB to
 * B, B forwards it to C, C answers B, B answers A; every hop reads the payload into the
 * function's own buffer and writes it to the next pipe. One sample is one round trip seen by A.
 */
#include "lbench.h"

#include <sys/wait.h>

enum { PAYLOAD = 1024, RUNS = 201, WARMUP = 20 };

/* Reads exactly PAYLOAD bytes; returns 0 at end of file. */
static int read_full(int fd, char *buf)
{
	size_t got = 0;
	while (got < PAYLOAD) {
		ssize_t n = read(fd, buf + got, PAYLOAD - got);
		if (n == 0 && got == 0)
			return 0;
		if (n <= 0)
			lb_die("read");
		got += (size_t)n;
	}
	return 1;
}

static void write_full(int fd, const char *buf)
{
	if (write(fd, buf, PAYLOAD) != PAYLOAD)
		lb_die("write");
}

static void close_all(int (*p)[2], int n, int keep_a, int keep_b)
{
	for (int i = 0; i < n; i++)
		for (int j = 0; j < 2; j++)
			if (p[i][j] != keep_a && p[i][j] != keep_b)
				close(p[i][j]);
}

int main(void)
{
	/* ab: A->B, bc: B->C, cb: C->B, ba: B->A */
	int pipes[4][2];
	enum { AB, BC, CB, BA };
	lb_init("chain");
	for (int i = 0; i < 4; i++)
		if (pipe(pipes[i]))
			lb_die("pipe");
	char buf[PAYLOAD];
	pid_t b = fork();
	if (b < 0)
		lb_die("fork");
	if (b == 0) {
		pid_t c = fork();
		if (c < 0)
			lb_die("fork");
		if (c == 0) {
			close_all(pipes, 4, pipes[BC][0], pipes[CB][1]);
			while (read_full(pipes[BC][0], buf))
				write_full(pipes[CB][1], buf);
			_exit(0);
		}
		int keep[4] = { pipes[AB][0], pipes[BC][1], pipes[CB][0], pipes[BA][1] };
		for (int i = 0; i < 4; i++)
			for (int j = 0; j < 2; j++) {
				int fd = pipes[i][j];
				if (fd != keep[0] && fd != keep[1] && fd != keep[2] && fd != keep[3])
					close(fd);
			}
		while (read_full(pipes[AB][0], buf)) {
			write_full(pipes[BC][1], buf);
			if (!read_full(pipes[CB][0], buf))
				lb_die("C closed");
			write_full(pipes[BA][1], buf);
		}
		close(pipes[BC][1]);
		waitpid(c, NULL, 0);
		_exit(0);
	}
	close_all(pipes, 4, pipes[AB][1], pipes[BA][0]);
	memset(buf, 'a', sizeof buf);
	uint64_t *s = lb_samples(RUNS);
	for (int i = -WARMUP; i < 0; i++) {
		write_full(pipes[AB][1], buf);
		read_full(pipes[BA][0], buf);
	}
	lb_begin("chain_abcba_1k");
	for (int i = 0; i < RUNS; i++) {
		uint64_t t0 = lb_rdtsc();
		write_full(pipes[AB][1], buf);
		if (!read_full(pipes[BA][0], buf))
			lb_die("B closed");
		uint64_t t1 = lb_rdtsc();
		s[i] = lb_sample(t0, t1);
	}
	lb_report("chain", "chain_abcba_1k", s, RUNS);
	close(pipes[AB][1]);
	int st;
	if (waitpid(b, &st, 0) != b || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		lb_die("B failed");
	return 0;
}
