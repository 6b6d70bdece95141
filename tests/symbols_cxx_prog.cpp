// Helper for symbols_e2e: a C++ program whose hot code lives in a
// namespace, a class, a template and an operator, so its profile must show
// demangled names. It profiles its main thread until it has the number of
// samples asked for and writes the pprof profile to argv[1].
#include <snapprof/snapprof.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

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
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s OUT.pb.gz SAMPLES\n", argv[0]);
        return 2;
    }
    snapprof_thread_t *me;
    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = 1000000;
    snapprof_profiler_t *p;
    snapprof_builder_t *b;
    if (snapprof_thread_register(&me) != 0 || snapprof_profiler_create(&params, &me, 1, &p) != 0 ||
        snapprof_pprof_builder_create(argv[1], &b) != 0 ||
        snapprof_profiler_add_builder(p, b) != 0 || snapprof_profiler_start(p) != 0) {
        std::fprintf(stderr, "profiler set-up failed\n");
        return 1;
    }
    std::uint64_t want = std::strtoull(argv[2], nullptr, 10);
    snapprof_demo::Spinner spinner;
    snapprof_demo::Accumulator<double> acc;
    snapprof_stats_t st;
    do {
        spinner.spin(1000000);
        spinner += 1000000;
        acc.add_many(1.0, 1000000);
        snapprof_profiler_get_stats(p, &st);
    } while (st.samples < want);
    int rc = snapprof_profiler_stop(p);
    snapprof_profiler_destroy(p);
    snapprof_thread_release(me);
    std::printf("samples=%llu rc=%d\n", static_cast<unsigned long long>(st.samples), rc);
    return rc == 0 ? 0 : 1;
}
