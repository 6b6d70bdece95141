// A C++ library linked into test_heap_got: operator new[] and new through
// its own GOT (and libstdc++'s, whose operator new calls malloc through
// libstdc++'s GOT: noted once), and a throwing operator new caught here.
#include <cstddef>
#include <new>

extern "C" __attribute__((noinline)) void got_cxx_new(void **out, int n, std::size_t size)
{
    for (int i = 0; i < n; i++)
        out[i] = new char[size];
    __asm__ volatile("" ::: "memory");
}

extern "C" __attribute__((noinline)) void got_cxx_delete(void **blocks, int n)
{
    for (int i = 0; i < n; i++)
        delete[] static_cast<char *>(blocks[i]);
}

// 1 when operator new threw std::bad_alloc for size (and was caught).
extern "C" __attribute__((noinline)) int got_cxx_new_throws(std::size_t size)
{
    try {
        char *volatile p = new char[size];
        delete[] p;
        return 0;
    } catch (const std::bad_alloc &) {
        return 1;
    }
}
