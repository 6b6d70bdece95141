// A C++ program for the heap hooks' tests: every operator new and delete
// of the families the hooks interpose, called directly so that the program
// knows each size, with the test consumer's counts compared with its own.
// libstdc++'s operators reach malloc, aligned_alloc and operator delete
// again: each must still be noted once.
#include "test.h"
#include "test_preload_heap_consumer.h"
#ifdef GOT_MODE
#include "preload_heap/heap_got.h" // linked with the GOT patcher instead
#endif

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <new>

static hc_size_fn size_fn;
static hc_totals_fn totals_fn;

static size_t sz(int k)
{
    return HC_BASE + 64 * (size_t)k;
}

static uint64_t want_a[64], want_f[64], base_a[64], base_f[64];

struct Obj {
    char bytes[HC_BASE + 64 * 20];
};

struct alignas(256) Aligned { // its size a multiple of 256
    char bytes[HC_BASE + 64 * 23];
};

int main()
{
#ifdef GOT_MODE
    int patched = snapprof_heap_hooks_install();
    printf("install: %d entries\n", patched);
    if (patched <= 0)
        TEST_FAIL("install patched nothing");
#endif
    size_fn = (hc_size_fn)dlsym(RTLD_DEFAULT, "test_heap_consumer_size");
    totals_fn = (hc_totals_fn)dlsym(RTLD_DEFAULT, "test_heap_consumer_totals");
    printf("consumer: %s\n", size_fn ? "yes" : "no");
    hc_totals_t t0 = {}, t1 = {};
    if (totals_fn)
        totals_fn(&t0);
    for (int k = 0; k < 64 && size_fn; k++)
        size_fn(sz(k), &base_a[k], &base_f[k]);
    std::align_val_t al{256};
    uint64_t made = 0;
    static volatile size_t huge_v = SIZE_MAX / 2;
    const size_t huge = huge_v;

    for (int round = 0; round < 5; round++) {
        void *p;
#define ALLOC(k) (want_a[k]++, made++)
#define FREE(k) (want_f[k]++)
        errno = 1234;
        p = ::operator new(sz(0));
        ALLOC(0);
        ASSERT_EQ(errno, 1234);
        ::operator delete(p);
        FREE(0);
        p = ::operator new[](sz(1));
        ALLOC(1);
        ::operator delete[](p);
        FREE(1);
        p = ::operator new(sz(2));
        ALLOC(2);
        ::operator delete(p, sz(2));
        FREE(2);
        p = ::operator new[](sz(3));
        ALLOC(3);
        ::operator delete[](p, sz(3));
        FREE(3);
        p = ::operator new(sz(4), al);
        ALLOC(4);
        if ((uintptr_t)p % 256)
            TEST_FAIL("not aligned");
        ::operator delete(p, al);
        FREE(4);
        p = ::operator new[](sz(5), al);
        ALLOC(5);
        ::operator delete[](p, al);
        FREE(5);
        p = ::operator new(sz(6), al);
        ALLOC(6);
        ::operator delete(p, sz(6), al);
        FREE(6);
        p = ::operator new[](sz(7), al);
        ALLOC(7);
        ::operator delete[](p, sz(7), al);
        FREE(7);
        p = ::operator new(sz(8), std::nothrow);
        ALLOC(8);
        ::operator delete(p, std::nothrow);
        FREE(8);
        p = ::operator new[](sz(9), std::nothrow);
        ALLOC(9);
        ::operator delete[](p, std::nothrow);
        FREE(9);
        p = ::operator new(sz(10), al, std::nothrow);
        ALLOC(10);
        ::operator delete(p, al, std::nothrow);
        FREE(10);
        p = ::operator new[](sz(11), al, std::nothrow);
        ALLOC(11);
        ::operator delete[](p, al, std::nothrow);
        FREE(11);
        // new-expressions: the compiler picks sized and aligned operators.
        // volatile: clang may leave out a new-expression deleted at once.
        Obj *volatile o = new Obj;
        ALLOC(20);
        delete o;
        FREE(20);
        Aligned *volatile a = new Aligned;
        ALLOC(23);
        if ((uintptr_t)a % 256)
            TEST_FAIL("not aligned");
        delete a;
        FREE(23);

        // Failing: nothrow gives NULL, the others throw; nothing noted, and
        // the next allocation is noted again (the unwinding left the hooks'
        // depth counter as it was).
        if (::operator new(huge, std::nothrow) != nullptr)
            TEST_FAIL("huge nothrow new succeeded");
        if (::operator new[](huge, al, std::nothrow) != nullptr)
            TEST_FAIL("huge aligned nothrow new succeeded");
#if !defined(SNAPPROF_SANITIZER_BUILD) // their operator new dies of it instead of throwing
        bool threw = false;
        try {
            p = ::operator new(huge);
        } catch (const std::bad_alloc &) {
            threw = true;
        }
        if (!threw)
            TEST_FAIL("huge new did not throw");
        threw = false;
        try {
            p = ::operator new[](huge, al);
        } catch (const std::bad_alloc &) {
            threw = true;
        }
        if (!threw)
            TEST_FAIL("huge aligned new did not throw");
#endif
        p = ::operator new(sz(12));
        ALLOC(12);
        ::operator delete(p);
        FREE(12);
    }
    if (size_fn) {
        for (int k = 0; k < 64; k++) {
            uint64_t a, f;
            size_fn(sz(k), &a, &f);
            if (a - base_a[k] != want_a[k] || f - base_f[k] != want_f[k])
                TEST_FAIL("size %zu: told %llu allocations and %llu frees, made %llu and %llu",
                          sz(k), (unsigned long long)(a - base_a[k]),
                          (unsigned long long)(f - base_f[k]), (unsigned long long)want_a[k],
                          (unsigned long long)want_f[k]);
        }
        totals_fn(&t1);
        ASSERT_EQ(t1.allocs - t0.allocs, made);
        ASSERT_EQ(t1.doubles, 0);
        ASSERT_EQ(t1.nulls, 0);
        // The exceptions thrown above were allocated inside operator new
        // (not noted: the program did not ask for them) and freed at the
        // catch, outside it: at most one free a throw the consumer never
        // saw allocated.
        if (t1.unknown_frees - t0.unknown_frees > 10)
            TEST_FAIL("%llu frees of blocks never noted",
                      (unsigned long long)(t1.unknown_frees - t0.unknown_frees));
        printf("noted %llu allocations, as made\n", (unsigned long long)made);
    }
    printf("ok cxx\n");
    return 0;
}
