// CPU time of the calling thread, for the benches that report GB per CPU-second (so other jobs on a busy
// host do not count against a kernel).
#pragma once

#include <ctime>

inline double thread_seconds() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
