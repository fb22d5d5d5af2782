/*
 * forkserve: Groundhog's Linux baseline, request isolation by a process forked per request from
 * a warmed parent (the `restore` group).
 *
 * The parent runs an init once: it builds a greeting in its own memory and maps a 64 MiB
 * private anonymous heap it leaves untouched, as Fjord's `dirty` function has. Then, per
 * request, it writes the request into a pipe and forks; the child reads the request, computes
 * the response, writes it into a second pipe and exits; the parent reads the response and
 * reaps the child. No request can see what an earlier one left: each runs in a fresh copy of
 * the parent's state, which is what Groundhog's restore gives a reused instance.
 *
 * Requests, as in `cargo xtask bench restore`: `hello` (the child answers `hello, world!` from
 * the greeting) and `dirty` with 1, 10, 100 and 1,000 pages (the child writes one byte into
 * each of the first N pages of the heap and answers N). Per request it prints
 *
 *   <target>_latency_restore  request written to response read (fork, the child's work, the
 *                             response through the pipe): the request's latency;
 *   <target>_cycle_restore    request written to the child reaped: what the parent spends
 *                             before it can serve the next request in a clean state (Fjord's
 *                             counterpart is the latency plus the restore cost).
 */
#include "lbench.h"

#include <sys/mman.h>
#include <sys/wait.h>

/* The heap's size, the `dirty` function's `heap_size`. */
#define HEAP (64UL << 20)
#define PAGE 4096UL

/* What init builds: the greeting and the untouched heap. */
static char *greeting;
static char *heap;

static void init(void)
{
	greeting = malloc(16);
	if (!greeting)
		lb_die("malloc");
	memcpy(greeting, "hello, ", 8);
	heap = mmap(NULL, HEAP, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (heap == MAP_FAILED)
		lb_die("mmap");
}

/* Writes all of `len` bytes or dies. */
static void write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);
		if (n <= 0)
			lb_die("write");
		buf += n;
		len -= (size_t)n;
	}
}

/* The child: serves the request waiting in `req` and answers into `resp`. */
static void serve(int req, int resp)
{
	char in[32], out[64];
	ssize_t n = read(req, in, sizeof in - 1);
	if (n <= 0)
		_exit(2);
	in[n] = '\0';
	size_t len;
	if (strcmp(in, "world") == 0) {
		len = strlen(greeting);
		memcpy(out, greeting, len);
		memcpy(out + len, in, (size_t)n);
		len += (size_t)n;
		out[len++] = '!';
	} else {
		unsigned long pages = strtoul(in, NULL, 10);
		if (pages > HEAP / PAGE)
			pages = HEAP / PAGE;
		for (unsigned long p = 0; p < pages; p++)
			((volatile char *)heap)[p * PAGE] = 1;
		len = (size_t)snprintf(out, sizeof out, "%lu", pages);
	}
	write_all(resp, out, len);
	_exit(0);
}

/* One request: its latency and its whole cycle, in instructions. */
static void request(const char *body, int req[2], int resp[2], uint64_t *latency,
		    uint64_t *cycle)
{
	char answer[64];
	uint64_t t0 = lb_rdtsc();
	write_all(req[1], body, strlen(body));
	pid_t pid = fork();
	if (pid == 0)
		serve(req[0], resp[1]);
	if (pid < 0)
		lb_die("fork");
	ssize_t n = read(resp[0], answer, sizeof answer);
	uint64_t t1 = lb_rdtsc();
	if (n <= 0)
		lb_die("read response");
	int st;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		lb_die("waitpid");
	uint64_t t2 = lb_rdtsc();
	*latency = lb_sample(t0, t1);
	*cycle = lb_sample(t0, t2);
}

int main(void)
{
	static const struct {
		const char *label, *body;
		int runs;
	} targets[] = {
		{ "hello", "world", 51 },     { "dirty_1", "1", 51 },	  { "dirty_10", "10", 51 },
		{ "dirty_100", "100", 21 },   { "dirty_1000", "1000", 11 },
	};
	lb_init("forkserve");
	init();
	int req[2], resp[2];
	if (pipe(req) != 0 || pipe(resp) != 0)
		lb_die("pipe");
	for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
		int runs = targets[t].runs;
		uint64_t *lat = lb_samples(runs), *cyc = lb_samples(runs), a, b;
		for (int i = 0; i < 2; i++)
			request(targets[t].body, req, resp, &a, &b);
		for (int i = 0; i < runs; i++)
			request(targets[t].body, req, resp, &lat[i], &cyc[i]);
		char metric[64];
		snprintf(metric, sizeof metric, "%s_latency_restore", targets[t].label);
		lb_report("restore", metric, lat, runs);
		snprintf(metric, sizeof metric, "%s_cycle_restore", targets[t].label);
		lb_report("restore", metric, cyc, runs);
		free(lat);
		free(cyc);
	}
	return 0;
}
