/*
 * checkpoint_full_copy_<size> / restore_full_copy_<size>: the process's working set of <MiB>
 * MiB of private anonymous memory (every page present) is copied whole into a snapshot area
 * (checkpoint) and back (restore), with `rep movsq`. Both areas are faulted in beforehand, so
 * a sample is the copy alone: the lower bound of any full-copy scheme on Linux.
 * Usage: checkpoint <MiB>.
 */
#include "lbench.h"

#include <sys/mman.h>

static char *map_touched(size_t bytes, char fill)
{
	char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		lb_die("mmap");
	for (size_t off = 0; off < bytes; off += 4096)
		p[off] = fill;
	return p;
}

int main(int argc, char **argv)
{
	size_t mib = lb_arg_mib(argc, argv);
	if (mib == 0)
		lb_die("size must be at least 1 MiB");
	size_t bytes = mib << 20;
	int runs = mib >= 100 ? 5 : mib >= 10 ? 11 : 21;
	char ckpt[64], rest[64];
	snprintf(ckpt, sizeof ckpt, "checkpoint_full_copy_%zumb", mib);
	snprintf(rest, sizeof rest, "restore_full_copy_%zumb", mib);
	lb_init("checkpoint");
	char *mem = map_touched(bytes, 1);
	char *snap = map_touched(bytes, 2);
	uint64_t *s = lb_samples(runs);

	lb_copy_movsq(snap, mem, bytes);
	lb_begin(ckpt);
	for (int i = 0; i < runs; i++) {
		uint64_t t0 = lb_rdtsc();
		lb_copy_movsq(snap, mem, bytes);
		uint64_t t1 = lb_rdtsc();
		s[i] = lb_sample(t0, t1);
	}
	lb_report("checkpoint", ckpt, s, runs);

	lb_copy_movsq(mem, snap, bytes);
	lb_begin(rest);
	for (int i = 0; i < runs; i++) {
		uint64_t t0 = lb_rdtsc();
		lb_copy_movsq(mem, snap, bytes);
		uint64_t t1 = lb_rdtsc();
		s[i] = lb_sample(t0, t1);
	}
	lb_report("checkpoint", rest, s, runs);
	if (memcmp(mem, snap, bytes) != 0)
		lb_die("restore mismatch");
	return 0;
}
