#include "observe/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread-pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace memtile {
namespace {

uint64_t sum_lines_plain(const uint8_t* p, size_t n_lines) {
    uint64_t acc[8] = {};
    for (size_t i = 0; i < n_lines; i++) {
        uint64_t v[8];
        std::memcpy(v, p + i * 64, 64);
        for (int k = 0; k < 8; k++) acc[k] += v[k];
    }
    uint64_t s = 0;
    for (uint64_t a : acc) s += a;
    return s;
}

// Sums n bytes at p (any alignment) into a value the compiler cannot drop. Four independent accumulators keep
// enough loads in flight that the core, not the dependency chain, limits the rate; the tail past the last whole
// 128 bytes is summed bytewise.
#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t sum_bytes_avx2(const uint8_t* p, size_t n) {
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        const __m256i* v = reinterpret_cast<const __m256i*>(p + i);
        acc[0] = _mm256_add_epi64(acc[0], _mm256_loadu_si256(v));
        acc[1] = _mm256_add_epi64(acc[1], _mm256_loadu_si256(v + 1));
        acc[2] = _mm256_add_epi64(acc[2], _mm256_loadu_si256(v + 2));
        acc[3] = _mm256_add_epi64(acc[3], _mm256_loadu_si256(v + 3));
    }
    const __m256i s = _mm256_add_epi64(_mm256_add_epi64(acc[0], acc[1]), _mm256_add_epi64(acc[2], acc[3]));
    alignas(32) uint64_t out[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), s);
    uint64_t r = out[0] + out[1] + out[2] + out[3];
    for (; i < n; i++) r += p[i];
    return r;
}
#endif

uint64_t sum_bytes(const uint8_t* p, size_t n) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) return sum_bytes_avx2(p, n);
#endif
    uint64_t r = sum_lines_plain(p, n / 64);
    for (size_t i = n / 64 * 64; i < n; i++) r += p[i];
    return r;
}

uint64_t sum_lines(const uint8_t* p, size_t n_lines) {
    return sum_bytes(p, n_lines * 64);
}

// xor_runs' value over [p, p + n) read in order, 8 bytes at a time (p + n - tail zero-padded).
uint64_t xor_words(const uint8_t* p, size_t n) {
    uint64_t r = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        std::memcpy(&w, p + i, 8);
        r ^= w;
    }
    if (i < n) {
        uint64_t w = 0;
        std::memcpy(&w, p + i, n - i);  // little-endian: the bytes land in the low end, as in a whole word
        r ^= w;
    }
    return r;
}

// The runs of xor_runs: S runs of len bytes (a multiple of 128) starting at p, p + len, ...
#if defined(__x86_64__)
template <int S>
__attribute__((target("avx2"))) uint64_t xor_runs_avx2(const uint8_t* p, size_t len) {
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (size_t o = 0; o < len; o += 128)
        for (int s = 0; s < S; s++) {
            const auto* v = reinterpret_cast<const __m256i*>(p + size_t(s) * len + o);
            for (int k = 0; k < 4; k++) acc[k] = _mm256_xor_si256(acc[k], _mm256_loadu_si256(v + k));
        }
    const __m256i x = _mm256_xor_si256(_mm256_xor_si256(acc[0], acc[1]), _mm256_xor_si256(acc[2], acc[3]));
    alignas(32) uint64_t out[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), x);
    return out[0] ^ out[1] ^ out[2] ^ out[3];
}
#endif

uint64_t xor_runs_plain(const uint8_t* p, size_t len, int streams) {
    uint64_t acc[4] = {};
    for (size_t o = 0; o < len; o += 32)
        for (int s = 0; s < streams; s++) {
            uint64_t w[4];
            std::memcpy(w, p + size_t(s) * len + o, 32);
            for (int k = 0; k < 4; k++) acc[k] ^= w[k];
        }
    return acc[0] ^ acc[1] ^ acc[2] ^ acc[3];
}

struct read_job {
    uint8_t* data;
    size_t lines;
    std::vector<uint64_t>* sinks;
};

}  // namespace

double measure_read_gbps(int threads, size_t bytes, int reps) {
    const size_t lines = bytes / 128 * 2;  // an even number of 64-byte lines
    if (lines == 0 || reps < 1) fail("observe", "measure_read_gbps: needs at least 128 bytes and one repetition");
    auto* data = static_cast<uint8_t*>(std::aligned_alloc(64, lines * 64));
    if (data == nullptr) fail("observe", "measure_read_gbps: cannot allocate {} bytes", lines * 64);
    thread_pool pool(threads);
    std::vector<uint64_t> sinks(size_t(pool.size()) * 8);
    read_job job{data, lines, &sinks};
    // Each thread reads back the part it touched first (pages local to its node where that matters).
    const auto part = [&job](int, int64_t a, int64_t b) {
        std::memset(job.data + size_t(a) * 64, int(a & 0xff), size_t(b - a) * 64);
    };
    pool.parallel_for(int64_t(lines / 2), [&](int th, int64_t a, int64_t b) { part(th, 2 * a, 2 * b); });
    double best = 0;
    for (int r = 0; r < reps; r++) {
        const auto t0 = std::chrono::steady_clock::now();
        pool.parallel_for(int64_t(lines / 2), [&job](int th, int64_t a, int64_t b) {
            (*job.sinks)[size_t(th) * 8] += sum_lines(job.data + size_t(a) * 128, size_t(b - a) * 2);
        });
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double gbps = double(lines * 64) / s / 1e9;
        if (gbps > best) best = gbps;
    }
    std::free(data);
    volatile uint64_t keep = 0;
    for (uint64_t v : sinks) keep = keep + v;
    return best;
}

double measure_read_gbps(thread_pool& pool, std::span<const std::span<const uint8_t>> ranges, int reps) {
    uint64_t total = 0;
    for (const auto& r : ranges) total += r.size();
    if (total < 128 || reps < 1) fail("observe", "measure_read_gbps: needs at least 128 bytes and one repetition");
    std::vector<uint64_t> sinks(size_t(pool.size()) * 8);
    // Thread th reads bytes [a, b) of the ranges laid end to end, in units of 64 bytes.
    const auto read = [&](int th, uint64_t a, uint64_t b) {
        uint64_t base = 0, s = 0;
        for (const auto& r : ranges) {
            const uint64_t lo = std::max(a, base), hi = std::min(b, base + r.size());
            if (lo < hi) s += sum_bytes(r.data() + (lo - base), size_t(hi - lo));
            base += r.size();
        }
        sinks[size_t(th) * 8] += s;
    };
    const int64_t units = int64_t((total + 63) / 64);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        const auto t0 = std::chrono::steady_clock::now();
        pool.parallel_for(units, [&](int th, int64_t a, int64_t b) {
            read(th, uint64_t(a) * 64, std::min(total, uint64_t(b) * 64));
        });
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, double(total) / s / 1e9);
    }
    volatile uint64_t keep = 0;
    for (uint64_t v : sinks) keep = keep + v;
    return best;
}

uint64_t xor_runs(const uint8_t* p, size_t n, int streams) {
    if (streams < 1 || streams > 8) fail("observe", "xor_runs: {} streams (1 to 8)", streams);
    const size_t len = n / (size_t(streams) * 128) * 128;
    uint64_t r = 0;
    if (len > 0) {
#if defined(__x86_64__)
        if (__builtin_cpu_supports("avx2") && (streams == 1 || streams == 2 || streams == 4)) {
            r = streams == 1   ? xor_runs_avx2<1>(p, len)
                : streams == 2 ? xor_runs_avx2<2>(p, len)
                               : xor_runs_avx2<4>(p, len);
        } else
#endif
            r = xor_runs_plain(p, len, streams);
    }
    const size_t done = len * size_t(streams);  // a multiple of 8, so the words after it keep their alignment to p
    return r ^ xor_words(p + done, n - done);
}

double measure_decode_read_gbps(thread_pool& pool, std::span<const std::span<const uint8_t>> ranges, int streams,
                                int reps) {
    uint64_t total = 0;
    for (const auto& r : ranges) total += r.size();
    if (total < 128 || reps < 1)
        fail("observe", "measure_decode_read_gbps: needs at least 128 bytes and one repetition");
    if (streams < 1 || streams > 8) fail("observe", "measure_decode_read_gbps: {} streams (1 to 8)", streams);
    std::vector<uint64_t> sinks(size_t(pool.size()) * 8);
    double best = 0;
    for (int rep = 0; rep < reps; rep++) {
        const auto t0 = std::chrono::steady_clock::now();
        for (const auto& r : ranges) {
            const int64_t units = int64_t((r.size() + 127) / 128);  // 128-byte units, as rows in groups
            pool.parallel_for(units, [&](int th, int64_t a, int64_t b) {
                const size_t lo = size_t(a) * 128, hi = std::min(r.size(), size_t(b) * 128);
                sinks[size_t(th) * 8] ^= xor_runs(r.data() + lo, hi - lo, streams);
            });
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, double(total) / s / 1e9);
    }
    volatile uint64_t keep = 0;
    for (uint64_t v : sinks) keep = keep ^ v;
    return best;
}

}  // namespace memtile
