/* bench_unwind's recursions, compiled once per workload with that
 * workload's flags (see bench/CMakeLists.txt): WORK_NAME names the entry. A
 * call that returns a value it adds to stays a real call, so the stack has
 * one frame per level. */
#include <stdint.h>

uint64_t WORK_NAME(void *arg, int depth, uint64_t (*bottom)(void *));

__attribute__((noinline)) uint64_t WORK_NAME(void *arg, int depth, uint64_t (*bottom)(void *))
{
    if (depth == 0)
        return bottom(arg);
    uint64_t r = WORK_NAME(arg, depth - 1, bottom);
    __asm__ volatile("" : "+r"(r));
    return r + 1;
}
