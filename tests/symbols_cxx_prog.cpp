// Helper for symbols_e2e: a C++ program whose hot code lives in a
// namespace, a class, a template and an operator, so its profile must show
// demangled names. It profiles its main thread until it has the number of
// samples asked for and writes the pprof profile to argv[1].
#include "symbols_prog.h"

#include <cstdint>

namespace snapprof_demo
{

template <typename T> struct Accumulator {
    T total{};
    __attribute__((noinline)) void add_many(T seed, int n);
};

template <typename T> void Accumulator<T>::add_many(T seed, int n)
{
    volatile T x = seed;
    for (int i = 0; i < n; i++)
        x = x * T(3) + T(i);
    total += x;
}

class Spinner
{
  public:
    __attribute__((noinline)) std::uint64_t spin(int rounds);
    __attribute__((noinline)) Spinner &operator+=(int rounds);

  private:
    volatile std::uint64_t state_ = 1;
};

std::uint64_t Spinner::spin(int rounds)
{
    for (int i = 0; i < rounds; i++)
        state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return state_;
}

Spinner &Spinner::operator+=(int rounds)
{
    for (int i = 0; i < rounds; i++)
        state_ = state_ ^ (state_ << 7) ^ std::uint64_t(i);
    return *this;
}

} // namespace snapprof_demo

int main(int argc, char **argv)
{
    snapprof_thread_t *me;
    std::uint64_t want;
    snapprof_profiler_t *p = symbols_prog_start(argc, argv, &me, &want);
    snapprof_demo::Spinner spinner;
    snapprof_demo::Accumulator<double> acc;
    snapprof_stats_t st;
    do {
        spinner.spin(1000000);
        spinner += 1000000;
        acc.add_many(1.0, 1000000);
        snapprof_profiler_get_stats(p, &st);
    } while (st.samples < want);
    return symbols_prog_finish(p, me, &st);
}
