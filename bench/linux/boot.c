/*
 * boot_to_init: the first program /init starts prints the TSC, i.e. the guest instructions
 * executed since the machine started (firmware, kernel boot, /init's shell starting it).
 */
#include "lbench.h"

int main(void)
{
	uint64_t t = lb_rdtsc();
	printf("LBENCH {\"group\":\"boot\",\"metric\":\"boot_to_init\",\"unit\":\"insns\","
	       "\"median\":%llu,\"min\":%llu,\"max\":%llu,\"runs\":1}\n",
	       (unsigned long long)t, (unsigned long long)t, (unsigned long long)t);
	return 0;
}
