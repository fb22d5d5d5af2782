/* hello: the static program that fork_exec_wait executes. */
#include <stdio.h>

int main(void)
{
	printf("hello, world\n");
	return 0;
}
