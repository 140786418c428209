// Memory read bandwidth as the decode kernels see it: a STREAM-style read (sum of a large array with wide
// loads), measured with the same thread count, so kernel throughput can be reported as a fraction of it.
#pragma once

#include <cstddef>

namespace memtile {

// Best-of-`reps` read bandwidth in GB/s (1e9 bytes/s) of `threads` threads summing disjoint parts of one
// `bytes`-byte array (use >= 1 GiB so caches do not count). The array is allocated, touched by the threads
// that read it, and freed inside the call.
double measure_read_gbps(int threads, size_t bytes, int reps);

}  // namespace memtile
