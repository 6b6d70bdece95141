// C++ functions for the symbols tests: their addresses, and the names the
// symbolizer must show for them (demangled) and keep (mangled).
#include <cstdint>

namespace snapprof_test
{

class Widget
{
  public:
    __attribute__((noinline)) int spin(int n);
};

int Widget::spin(int n)
{
    volatile int x = 0;
    for (int i = 0; i < n; i++)
        x = x * 7 + i;
    return x;
}

template <typename T> __attribute__((noinline)) T twice(T v)
{
    volatile T x = v;
    return x + x;
}

template double twice<double>(double);

} // namespace snapprof_test

extern "C" {

struct cxx_fn {
    std::uintptr_t address;
    const char *demangled;
    const char *mangled;
};

// Fills out[0..2) and returns 2.
int symbols_cxx_functions(struct cxx_fn *out)
{
    int (snapprof_test::Widget::*spin)(int) = &snapprof_test::Widget::spin;
    // A pointer to a non-virtual member is its address in the Itanium ABI.
    std::uintptr_t spin_addr;
    static_assert(sizeof spin >= sizeof spin_addr, "member pointer layout");
    __builtin_memcpy(&spin_addr, &spin, sizeof spin_addr);
    out[0] = {spin_addr, "snapprof_test::Widget::spin(int)", "_ZN13snapprof_test6Widget4spinEi"};
    out[1] = {reinterpret_cast<std::uintptr_t>(&snapprof_test::twice<double>),
              "double snapprof_test::twice<double>(double)", "_ZN13snapprof_test5twiceIdEET_S1_"};
    snapprof_test::Widget w;
    (void)w.spin(3);
    (void)snapprof_test::twice(1.5);
    return 2;
}
}
