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

// The n bytes at p read as `streams` (1-8) equal runs in lockstep, 128 bytes of each run per step (the pattern of
// the decode's group streams), then the bytes past the runs in order. Returns the XOR of the little-endian 64-bit
// words at p + 8i (a last partial word zero-padded), which does not depend on `streams`: tests check with it that
// every byte is read.
uint64_t xor_runs(const uint8_t* p, size_t n, int streams);

// Best-of-`reps` GB/s of reading the ranges as the decode walks a model's weights, without its arithmetic: range by
// range (matrix by matrix, each a parallel_for over the pool as the matmul splits rows), each chunk a thread takes
// read by xor_runs with `streams` runs. The ceiling of a decode over these bytes on this machine: what the decode
// loses against it is the kernels' (arithmetic between loads costs read bandwidth, docs/cpu.md "Session 22"), what
// this read loses against the probe's is the layout's and the per-matrix hand-out's.
double measure_decode_read_gbps(thread_pool& pool, std::span<const std::span<const uint8_t>> ranges, int streams,
                                int reps);

}  // namespace memtile
