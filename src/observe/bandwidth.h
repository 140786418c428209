// Memory read bandwidth as the decode kernels see it: a STREAM-style read (sum of a large array with wide
// loads), measured with the same thread count, so kernel throughput can be reported as a fraction of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace memtile {

class thread_pool;

// Best-of-`reps` read bandwidth in GB/s (1e9 bytes/s) of `threads` threads summing disjoint parts of one
// `bytes`-byte array (use >= 1 GiB so caches do not count). The array is allocated, touched by the threads
// that read it, and freed inside the call.
double measure_read_gbps(int threads, size_t bytes, int reps);

// Best-of-`reps` read bandwidth in GB/s of the pool's threads summing the given byte ranges (e.g. a model's
// weights, the very pages its decode streams), the total split evenly over the threads in range order as
// the matmul splits rows. Why: on some VMs the read rate of a buffer depends on where its pages landed
// (a fresh 1 GiB buffer reads at one of two rates), so the pages decode reads are the fairest denominator.
double measure_read_gbps(thread_pool& pool, std::span<const std::span<const uint8_t>> ranges, int reps);

}  // namespace memtile
