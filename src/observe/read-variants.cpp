#include "observe/read-variants.h"

#include <fmt/core.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>

#include "core/error.h"
#include "core/thread-pool.h"
#include "observe/system-info.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace memtile {
namespace {

constexpr size_t k_step = 128;  // bytes per loop iteration: four 256-bit loads
constexpr size_t k_huge = size_t(2) << 20;

uint64_t sum_words_scalar(const uint8_t* p, size_t n) {
    uint64_t acc[4] = {};
    for (size_t i = 0; i < n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            std::memcpy(&w, p + i + size_t(k) * 8, 8);
            acc[k] += w;
        }
    return acc[0] + acc[1] + acc[2] + acc[3];
}

#if defined(__x86_64__)
// Sum of the 64-bit words of [p, p + n), n a multiple of 128. With a hint, the two lines `distance` bytes ahead
// of each 128-byte step are prefetched, never past p + n (the decode kernels also stop at their last row).
template <int Hint>
__attribute__((target("avx2"))) uint64_t sum_words_avx2(const uint8_t* p, size_t n, size_t distance) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    const size_t end = n > distance ? n - distance : 0;  // steps whose prefetch stays inside the range
    for (size_t i = 0; i < n; i += k_step) {
        if constexpr (Hint >= 0) {
            if (i < end) {
                _mm_prefetch(reinterpret_cast<const char*>(p + i + distance), static_cast<_mm_hint>(Hint));
                _mm_prefetch(reinterpret_cast<const char*>(p + i + distance + 64), static_cast<_mm_hint>(Hint));
            }
        }
        const __m256i* v = reinterpret_cast<const __m256i*>(p + i);
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(v));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(v + 1));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(v + 2));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(v + 3));
    }
    alignas(32) uint64_t out[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                       _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    return out[0] + out[1] + out[2] + out[3];
}

// Sum of the 64-bit words of S runs of `run` bytes (a multiple of 64) from p, p + run, ..., one line of each run
// per step.
template <int S>
__attribute__((target("avx2"))) uint64_t sum_runs_avx2(const uint8_t* p, size_t run) {
    __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (size_t i = 0; i < run; i += 64)
        for (int s = 0; s < S; s++) {
            const __m256i* v = reinterpret_cast<const __m256i*>(p + size_t(s) * run + i);
            a[2 * (s % 2)] = _mm256_add_epi64(a[2 * (s % 2)], _mm256_loadu_si256(v));
            a[2 * (s % 2) + 1] = _mm256_add_epi64(a[2 * (s % 2) + 1], _mm256_loadu_si256(v + 1));
        }
    alignas(32) uint64_t out[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                       _mm256_add_epi64(_mm256_add_epi64(a[0], a[1]), _mm256_add_epi64(a[2], a[3])));
    return out[0] + out[1] + out[2] + out[3];
}
#endif

// [p, p + n) read as v.streams runs side by side, then the bytes past the last whole run (fewer than streams x 64).
uint64_t sum_words_streams(const read_variant& v, const uint8_t* p, size_t n) {
    const size_t run = n / size_t(v.streams) / 64 * 64, covered = run * size_t(v.streams);
    uint64_t s = 0;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && run > 0) {
        switch (v.streams) {
            case 2: s = sum_runs_avx2<2>(p, run); break;
            case 4: s = sum_runs_avx2<4>(p, run); break;
            case 8: s = sum_runs_avx2<8>(p, run); break;
            default: s = sum_words_scalar(p, covered);
        }
    } else
#endif
    {
        s = sum_words_scalar(p, covered);
    }
    return s + sum_words_scalar(p + covered, n - covered);
}

uint64_t sum_words(const read_variant& v, const uint8_t* p, size_t n) {
    if (v.streams > 1) return sum_words_streams(v, p, n);
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        switch (v.hint) {
            case prefetch_hint::none: return sum_words_avx2<-1>(p, n, 0);
            case prefetch_hint::t0: return sum_words_avx2<_MM_HINT_T0>(p, n, v.distance);
            case prefetch_hint::t1: return sum_words_avx2<_MM_HINT_T1>(p, n, v.distance);
            case prefetch_hint::nta: return sum_words_avx2<_MM_HINT_NTA>(p, n, v.distance);
        }
    }
#endif
    return sum_words_scalar(p, n);
}

double thread_cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

std::string size_name(size_t b) {
    if (b >= (size_t(1) << 20) && b % (size_t(1) << 20) == 0) return fmt::format("{}m", b >> 20);
    if (b >= 1024 && b % 1024 == 0) return fmt::format("{}k", b >> 10);
    return fmt::format("{}", b);
}

}  // namespace

std::string read_variant_name(const read_variant& v) {
    static const char* hints[] = {"plain", "t0", "t1", "nta"};
    std::string s = hints[int(v.hint)];
    if (v.hint != prefetch_hint::none) s += fmt::format("-{}", size_name(v.distance));
    if (v.chunk_bytes) s += " chunks-" + size_name(v.chunk_bytes);
    if (v.passes > 1) s += fmt::format(" passes-{}", v.passes);
    if (v.streams > 1) s += fmt::format(" streams-{}", v.streams);
    if (v.huge_pages) s += " huge";
    return s;
}

std::vector<read_variant> standard_read_variants() {
    using h = prefetch_hint;
    constexpr size_t K = 1024, M = K * K;
    return {
        {},  // plain: the reference
        {h::t1, 8 * K},
        {h::t1, 32 * K},
        {h::t1, 128 * K},
        {h::t0, 2 * K},
        {h::t0, 32 * K},
        {h::nta, 2 * K},
        {h::nta, 32 * K},
        {h::none, 0, 2 * M},
        {h::t1, 32 * K, 2 * M},
        {h::none, 0, 0, 16},
        {h::t1, 32 * K, 0, 16},
        {h::none, 0, 0, 1, true},
        {h::none, 0, 2 * M, 1, true},
        {h::none, 0, 0, 16, true},
        {h::nta, 32 * K, 0, 1, true},
        {h::t1, 32 * K, 0, 1, true},
        {h::t1, 32 * K, 2 * M, 1, true},
        {h::none, 0, 0, 1, true, 2},
        {h::none, 0, 0, 1, true, 4},
        {h::none, 0, 0, 1, true, 8},
    };
}

uint64_t read_variant_share(const read_variant& v, const uint8_t* p, size_t bytes, int pass, int thread, int threads) {
    if (v.passes < 1 || threads < 1 || bytes % (k_step * size_t(v.passes)) || v.chunk_bytes % k_step)
        fail("observe", "read variant '{}': {} bytes do not split into {} passes and chunks of whole 128-byte steps",
             read_variant_name(v), bytes, v.passes);
    if (v.streams != 1 && (v.streams < 1 || v.hint != prefetch_hint::none || v.chunk_bytes))
        fail("observe", "read variant '{}': streams ({}) must be 1, or plain loads over contiguous shares",
             read_variant_name(v), v.streams);
    if (pass < 0 || pass >= v.passes || thread < 0 || thread >= threads)
        fail("observe", "read variant '{}': pass {} of {}, thread {} of {}", read_variant_name(v), pass, v.passes,
             thread, threads);
    const size_t pass_bytes = bytes / size_t(v.passes);
    const uint8_t* q = p + size_t(pass) * pass_bytes;
    if (v.chunk_bytes == 0) {
        const size_t steps = pass_bytes / k_step;
        const size_t a = steps * size_t(thread) / size_t(threads), b = steps * size_t(thread + 1) / size_t(threads);
        return sum_words(v, q + a * k_step, (b - a) * k_step);
    }
    uint64_t s = 0;
    for (size_t c = size_t(thread) * v.chunk_bytes; c < pass_bytes; c += size_t(threads) * v.chunk_bytes)
        s += sum_words(v, q + c, std::min(v.chunk_bytes, pass_bytes - c));
    return s;
}

double quick_best_read_gbps(int threads, size_t bytes, int reps) {
    thread_pool pool(threads);
    read_probe probe(bytes, pool);
    const read_variant variants[] = {{},
                                     {prefetch_hint::none, 0, 0, 1, true},
                                     {prefetch_hint::none, 0, 0, 1, true, 4},
                                     {prefetch_hint::none, 0, 0, 1, true, 8}};
    double best = 0;
    for (const auto& f : probe.measure(pool, variants, reps)) best = std::max(best, f.gbps);
    return best;
}

size_t best_read_index(std::span<const double> gbps) {
    if (gbps.empty()) fail("observe", "best_read_index: no figures");
    return size_t(std::max_element(gbps.begin(), gbps.end()) - gbps.begin());
}

read_probe::read_probe(size_t bytes, thread_pool& pool) : bytes_(bytes) {
    if (bytes < k_huge || bytes % k_huge)
        fail("observe", "read probe: {} bytes is not a positive multiple of 2 MiB", bytes);
    map_bytes_ = bytes + k_huge;
    for (int k = 0; k < 2; k++) {
        maps_[k] = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (maps_[k] == MAP_FAILED) {
            maps_[k] = nullptr;
            release();
            fail("observe", "read probe: cannot map {} bytes", map_bytes_);
        }
        auto* d = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(maps_[k]) + k_huge - 1) & ~(k_huge - 1));
        ::madvise(d, bytes, k == 0 ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
        (k == 0 ? small_ : huge_) = d;
        // First touch by the threads that read: thread t writes the t-th contiguous share (word i = i * odd).
        const int threads = pool.size();
        pool.parallel_for(threads, [&](int, int64_t a, int64_t b) {
            for (int64_t t = a; t < b; t++) {
                const size_t lo = bytes / 8 * size_t(t) / size_t(threads),
                             hi = bytes / 8 * size_t(t + 1) / size_t(threads);
                for (size_t i = lo; i < hi; i++) {
                    const uint64_t w = i * 0x9E3779B97F4A7C15ull;
                    std::memcpy(d + i * 8, &w, 8);
                }
            }
        });
    }
}

read_probe::~read_probe() {
    release();
}

void read_probe::release() {
    for (void*& m : maps_)
        if (m) {
            ::munmap(m, map_bytes_);
            m = nullptr;
        }
}

uint64_t read_probe::huge_bytes_granted() const {
    const auto s = read_text_file("/proc/self/smaps");
    if (!s) return 0;
    return parse_smaps_anon_huge(*s, reinterpret_cast<uintptr_t>(huge_)).value_or(0);
}

std::vector<read_variant_figure> read_probe::measure(thread_pool& pool, std::span<const read_variant> variants,
                                                     int reps) {
    if (reps < 1) fail("observe", "read probe: needs at least one repetition");
    const int threads = pool.size();
    std::vector<uint64_t> sinks(size_t(threads) * 8);  // one cache line per thread
    std::vector<double> cpu(size_t(threads) * 8);      // CPU-seconds of each share
    std::vector<read_variant_figure> out;
    for (const read_variant& v : variants) {
        const uint8_t* buf = v.huge_pages ? huge_ : small_;
        read_variant_figure f;
        for (int r = 0; r < reps; r++) {
            std::fill(sinks.begin(), sinks.end(), 0);
            std::fill(cpu.begin(), cpu.end(), 0.0);
            const auto t0 = std::chrono::steady_clock::now();
            for (int pass = 0; pass < v.passes; pass++)
                pool.parallel_for(threads, [&](int th, int64_t a, int64_t b) {
                    for (int64_t t = a; t < b; t++) {
                        const double c0 = thread_cpu_seconds();
                        sinks[size_t(th) * 8] += read_variant_share(v, buf, bytes_, pass, int(t), threads);
                        cpu[size_t(t) * 8] += thread_cpu_seconds() - c0;
                    }
                });
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            f.gbps = std::max(f.gbps, double(bytes_) / s / 1e9);
            double cpu_total = 0;
            for (double c : cpu) cpu_total += c;
            if (cpu_total > 0) f.gbps_cpu = std::max(f.gbps_cpu, double(bytes_) * threads / cpu_total / 1e9);
            f.checksum = 0;
            for (uint64_t x : sinks) f.checksum += x;
        }
        out.push_back(f);
    }
    return out;
}

}  // namespace memtile
