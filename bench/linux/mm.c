/*
 * Memory-map operations on one 4 KiB private anonymous page:
 *   mmap_4k              one mmap call (the page is unmapped, untimed, after each sample);
 *   munmap_4k            one munmap call of a page that was never touched (mapped untimed);
 *   mprotect_4k          one mprotect call switching a touched page between read-write and
 *                        read-only; the page sits between two PROT_NONE guard pages so no
 *                        call merges or splits VMAs;
 *   mmap_touch_munmap_4k mmap + write one byte + munmap, timed as one operation.
 */
#include "lbench.h"

#include <sys/mman.h>

enum { RUNS = 1001, WARMUP = 50, PAGE = 4096 };

static void *map_page(void)
{
	void *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		lb_die("mmap");
	return p;
}

static void unmap_page(void *p)
{
	if (munmap(p, PAGE))
		lb_die("munmap");
}

int main(void)
{
	lb_init("mm");
	uint64_t *s = lb_samples(RUNS);

	for (int i = -WARMUP; i < RUNS; i++) {
		uint64_t t0 = lb_rdtsc();
		void *p = map_page();
		uint64_t t1 = lb_rdtsc();
		unmap_page(p);
		if (i >= 0)
			s[i] = lb_sample(t0, t1);
	}
	lb_report("mm", "mmap_4k", s, RUNS);

	for (int i = -WARMUP; i < RUNS; i++) {
		void *p = map_page();
		uint64_t t0 = lb_rdtsc();
		unmap_page(p);
		uint64_t t1 = lb_rdtsc();
		if (i >= 0)
			s[i] = lb_sample(t0, t1);
	}
	lb_report("mm", "munmap_4k", s, RUNS);

	char *guarded = mmap(NULL, 3 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (guarded == MAP_FAILED)
		lb_die("mmap guarded");
	char *page = guarded + PAGE;
	if (mprotect(page, PAGE, PROT_READ | PROT_WRITE))
		lb_die("mprotect");
	page[0] = 1;
	for (int i = -WARMUP; i < 0; i++)
		if (mprotect(page, PAGE, (i & 1) ? PROT_READ | PROT_WRITE : PROT_READ))
			lb_die("mprotect");
	lb_begin("mprotect_4k");
	for (int i = 0; i < RUNS; i++) {
		int prot = (i & 1) ? PROT_READ | PROT_WRITE : PROT_READ;
		uint64_t t0 = lb_rdtsc();
		int r = mprotect(page, PAGE, prot);
		uint64_t t1 = lb_rdtsc();
		if (r)
			lb_die("mprotect");
		s[i] = lb_sample(t0, t1);
	}
	lb_report("mm", "mprotect_4k", s, RUNS);

	for (int i = -WARMUP; i < 0; i++) {
		volatile char *p = map_page();
		p[0] = 1;
		unmap_page((void *)p);
	}
	lb_begin("mmap_touch_munmap_4k");
	for (int i = 0; i < RUNS; i++) {
		uint64_t t0 = lb_rdtsc();
		volatile char *p = map_page();
		p[0] = 1;
		unmap_page((void *)p);
		uint64_t t1 = lb_rdtsc();
		s[i] = lb_sample(t0, t1);
	}
	lb_report("mm", "mmap_touch_munmap_4k", s, RUNS);
	return 0;
}
