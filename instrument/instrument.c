/* libsnapprof-instrument: GCC's -finstrument-functions hooks on top of
 * snapprof's function timing. A program built with -finstrument-functions
 * and linked with this library (and libsnapprof) gets exact enter/exit
 * times of its functions: slices per thread in the trace, and call counts
 * with total and self time per call path from the calls builder. Built
 * without -finstrument-functions itself, and the hooks carry
 * no_instrument_function, so timing never times itself. */
#include <snapprof/snapprof.h>

void __cyg_profile_func_enter(void *fn, void *call_site) __attribute__((no_instrument_function));
void __cyg_profile_func_exit(void *fn, void *call_site) __attribute__((no_instrument_function));

void __cyg_profile_func_enter(void *fn, void *call_site)
{
    (void)call_site;
    snapprof_func_enter(fn);
}

void __cyg_profile_func_exit(void *fn, void *call_site)
{
    (void)call_site;
    snapprof_func_exit(fn);
}
