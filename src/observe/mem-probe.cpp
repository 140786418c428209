#include "observe/mem-probe.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>

#include "core/error.h"
#include "core/thread-pool.h"
#include "observe/read-variants.h"
#include "observe/system-info.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace memtile {
namespace {

using clock_type = std::chrono::steady_clock;
constexpr size_t k_line = 64;
constexpr size_t k_huge = size_t(2) << 20;

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Anonymous memory aligned to 2 MiB, with a chosen page policy. Freed by the destructor.
class region {
public:
    enum class pages { default_pages, small_only, huge };
    region(size_t bytes, pages p) : bytes_(bytes) {
        if (p == pages::huge) {
            // A configured hugetlbfs pool is used when it can hold the region; otherwise transparent huge pages.
            const auto mi = read_text_file("/proc/meminfo");
            const meminfo_summary m = mi ? parse_meminfo(*mi) : meminfo_summary{};
            if (m.hugepages_free && m.hugepage_size == k_huge && *m.hugepages_free * k_huge >= bytes) {
                void* q = ::mmap(nullptr, round_up(bytes), PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
                if (q != MAP_FAILED) {
                    base_ = q;
                    map_bytes_ = round_up(bytes);
                    data_ = static_cast<uint8_t*>(q);
                    hugetlb_ = true;
                    return;
                }
            }
        }
        map_bytes_ = round_up(bytes) + k_huge;
        base_ = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base_ == MAP_FAILED) fail("probe", "cannot map {} bytes of memory", map_bytes_);
        data_ = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base_) + k_huge - 1) & ~(k_huge - 1));
        if (p == pages::huge) ::madvise(data_, round_up(bytes), MADV_HUGEPAGE);
        if (p == pages::small_only) ::madvise(data_, round_up(bytes), MADV_NOHUGEPAGE);
    }
    ~region() { ::munmap(base_, map_bytes_); }
    region(const region&) = delete;
    region& operator=(const region&) = delete;

    uint8_t* data() const { return data_; }
    size_t bytes() const { return bytes_; }
    // Bytes of the region backed by 2 MiB pages (after it has been touched); nullopt when unknown.
    std::optional<uint64_t> huge_bytes() const {
        if (hugetlb_) return round_up(bytes_);
        const auto s = read_text_file("/proc/self/smaps");
        if (!s) return std::nullopt;
        return parse_smaps_anon_huge(*s, reinterpret_cast<uintptr_t>(data_));
    }

private:
    static size_t round_up(size_t b) { return (b + k_huge - 1) / k_huge * k_huge; }
    size_t bytes_, map_bytes_ = 0;
    void* base_ = nullptr;
    uint8_t* data_ = nullptr;
    bool hugetlb_ = false;
};

// xorshift64*: a fast generator whose low bits are good enough to pick lines.
struct rng64 {
    uint64_t s;
    uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545F4914F6CDD1Dull;
    }
};

uint64_t sum_line(const uint8_t* p) {
    uint64_t v[8];
    std::memcpy(v, p, 64);
    return (v[0] + v[1]) ^ (v[2] + v[3]) ^ (v[4] + v[5]) ^ (v[6] + v[7]);
}

// Sequential kernels: 256-bit loads (and stores) over whole 64-byte lines, several lines in flight.
#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, size_t lines) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 2 <= lines; i += 2) {
        const __m256i* v = reinterpret_cast<const __m256i*>(p + i * k_line);
        a0 = _mm256_xor_si256(a0, _mm256_load_si256(v));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256(v + 1));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256(v + 2));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256(v + 3));
    }
    alignas(32) uint64_t out[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                       _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3)));
    uint64_t s = out[0] ^ out[1] ^ out[2] ^ out[3];
    for (; i < lines; i++) s ^= sum_line(p + i * k_line);
    return s;
}
__attribute__((target("avx2"))) void copy_avx2(uint8_t* dst, const uint8_t* src, size_t lines) {
    for (size_t i = 0; i < lines; i++) {
        const __m256i* s = reinterpret_cast<const __m256i*>(src + i * k_line);
        __m256i* d = reinterpret_cast<__m256i*>(dst + i * k_line);
        _mm256_store_si256(d, _mm256_load_si256(s));
        _mm256_store_si256(d + 1, _mm256_load_si256(s + 1));
    }
}
__attribute__((target("avx2,fma"))) void triad_avx2(double* a, const double* b, const double* c, double s, size_t n) {
    const __m256d vs = _mm256_set1_pd(s);
    for (size_t i = 0; i + 8 <= n; i += 8) {
        _mm256_store_pd(a + i, _mm256_fmadd_pd(vs, _mm256_load_pd(c + i), _mm256_load_pd(b + i)));
        _mm256_store_pd(a + i + 4, _mm256_fmadd_pd(vs, _mm256_load_pd(c + i + 4), _mm256_load_pd(b + i + 4)));
    }
}
#endif

bool have_avx2() {
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

uint64_t read_lines(const uint8_t* p, size_t lines) {
#if defined(__x86_64__)
    if (have_avx2()) return read_avx2(p, lines);
#endif
    uint64_t s = 0;
    for (size_t i = 0; i < lines; i++) s ^= sum_line(p + i * k_line);
    return s;
}

void copy_lines(uint8_t* dst, const uint8_t* src, size_t lines) {
#if defined(__x86_64__)
    if (have_avx2()) return copy_avx2(dst, src, lines);
#endif
    for (size_t i = 0; i < lines * k_line; i += 8) {
        uint64_t v;
        std::memcpy(&v, src + i, 8);
        std::memcpy(dst + i, &v, 8);
    }
}

void triad(double* a, const double* b, const double* c, double s, size_t n) {
#if defined(__x86_64__)
    if (have_avx2()) return triad_avx2(a, b, c, s, n);
#endif
    for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

class prober {
public:
    prober(const probe_options& o, const std::function<void(const std::string&)>& progress)
        : o_(o), progress_(progress), pool1_(1), pooln_(o.threads) {}

    thread_pool& pool(int threads) { return threads == 1 ? pool1_ : pooln_; }
    std::vector<int> thread_counts() const {
        return o_.threads > 1 ? std::vector<int>{1, o_.threads} : std::vector<int>{1};
    }
    void say(const std::string& s) {
        if (progress_) progress_(s);
    }

    // Best of reps passes of body(pool) after one untimed warm-up pass.
    template <typename F>
    double best_seconds(int threads, F&& body) {
        body(pool(threads));
        double best = 1e30;
        for (int r = 0; r < o_.reps; r++) {
            const auto t0 = clock_type::now();
            body(pool(threads));
            best = std::min(best, seconds_since(t0));
        }
        return best;
    }

    void touch(const region& r, thread_pool& p) {
        const int64_t blocks = int64_t((r.bytes() + 4095) / 4096);
        p.parallel_for(blocks, [&](int, int64_t a, int64_t b) {
            const size_t end = std::min(r.bytes(), size_t(b) * 4096);
            for (size_t i = size_t(a) * 4096; i < end; i += 8) {
                const uint64_t v = i * 0x9E3779B97F4A7C15ull;
                std::memcpy(r.data() + i, &v, 8);
            }
        });
    }

    // Every read variant, thread counts and variants interleaved over reps rounds (one pass each), the best of
    // each kept; then the fastest variant per thread count as the read_best test (the decode kernels prefetch,
    // so the plain loop alone may not be the read the machine achieves).
    void read_variants(probe_result& out, size_t bytes) {
        if (bytes < k_huge) return;
        say(fmt::format("read variants over 2 x {} MiB (prefetch, chunks, passes, 2 MiB pages)", bytes >> 20));
        const auto variants = standard_read_variants();
        read_probe rp(bytes, pooln_);
        const auto counts = thread_counts();
        std::vector<std::vector<double>> best(counts.size(), std::vector<double>(variants.size(), 0.0));
        for (int r = 0; r < o_.reps; r++)
            for (size_t ti = 0; ti < counts.size(); ti++) {
                const auto f = rp.measure(pool(counts[ti]), variants, 1);
                for (size_t v = 0; v < f.size(); v++) best[ti][v] = std::max(best[ti][v], f[v].gbps);
            }
        const uint64_t granted = rp.huge_bytes_granted();
        for (size_t ti = 0; ti < counts.size(); ti++) {
            for (size_t v = 0; v < variants.size(); v++)
                out.read_variants.push_back({read_variant_name(variants[v]), counts[ti], best[ti][v]});
            const size_t bi = best_read_index(best[ti]);
            out.bandwidth.push_back(
                {"read_best", counts[ti], best[ti][bi], 0, bytes,
                 fmt::format("{} ({:.2f} x plain in the same rounds; huge: {} of {} MiB on 2 MiB pages)",
                             read_variant_name(variants[bi]), best[ti][bi] / best[ti][0], granted >> 20, bytes >> 20)});
        }
    }

    void streaming(probe_result& out) {
        const size_t lines = std::max<size_t>(o_.stream_bytes / k_line, 64) & ~size_t(63);
        say(fmt::format("sequential read over {} MiB", lines * k_line >> 20));
        {
            region a(lines * k_line, region::pages::default_pages);
            touch(a, pooln_);
            for (int t : thread_counts()) {
                const double s = best_seconds(t, [&](thread_pool& p) {
                    p.parallel_for(int64_t(lines / 64), [&](int th, int64_t x, int64_t y) {
                        sink(th) ^= read_lines(a.data() + size_t(x) * 64 * k_line, size_t(y - x) * 64);
                    });
                });
                out.bandwidth.push_back({"read", t, double(lines * k_line) / s / 1e9, 0, lines * k_line, "plain loop"});
            }
        }
        read_variants(out, lines * k_line / k_huge * k_huge);
        say("copy");
        {
            const size_t half = lines / 2 & ~size_t(63);
            region a(half * k_line, region::pages::default_pages), b(half * k_line, region::pages::default_pages);
            touch(a, pooln_);
            touch(b, pooln_);
            for (int t : thread_counts()) {
                const double s = best_seconds(t, [&](thread_pool& p) {
                    p.parallel_for(int64_t(half / 64), [&](int, int64_t x, int64_t y) {
                        copy_lines(b.data() + size_t(x) * 64 * k_line, a.data() + size_t(x) * 64 * k_line,
                                   size_t(y - x) * 64);
                    });
                });
                out.bandwidth.push_back(
                    {"copy", t, 2.0 * double(half * k_line) / s / 1e9, 0, 2 * half * k_line, "read + write"});
            }
        }
        say("triad");
        {
            const size_t third = lines / 3 & ~size_t(63);
            region a(third * k_line, region::pages::default_pages), b(third * k_line, region::pages::default_pages),
                c(third * k_line, region::pages::default_pages);
            touch(a, pooln_);
            touch(b, pooln_);
            touch(c, pooln_);
            auto* da = reinterpret_cast<double*>(a.data());
            auto* db = reinterpret_cast<const double*>(b.data());
            auto* dc = reinterpret_cast<const double*>(c.data());
            // Touched bytes read as small doubles or NaNs; the result is never used, only the traffic.
            for (int t : thread_counts()) {
                const double s = best_seconds(t, [&](thread_pool& p) {
                    p.parallel_for(int64_t(third / 64), [&](int, int64_t x, int64_t y) {
                        const size_t off = size_t(x) * 64 * 8;
                        triad(da + off, db + off, dc + off, 3.0, size_t(y - x) * 64 * 8);
                    });
                });
                out.bandwidth.push_back(
                    {"triad", t, 3.0 * double(third * k_line) / s / 1e9, 0, 3 * third * k_line, "2 reads + 1 write"});
            }
        }
    }

    // Random 64-byte reads: hot_fraction of the accesses fall in a 16 KiB region, the rest anywhere.
    bandwidth_result random_reads(const region& r, int threads, const std::string& name, double hot_fraction) {
        const size_t lines = r.bytes() / k_line;
        size_t mask = 1;
        while (mask * 2 <= lines) mask *= 2;
        mask -= 1;
        const size_t hot_lines = (16 << 10) / k_line;
        const size_t hot_base = (lines / 2) & ~(hot_lines - 1);
        const uint64_t hot_cut = uint64_t(hot_fraction * 256.0);
        const int64_t items = int64_t(threads) * 8;
        const uint64_t per_item = std::max<uint64_t>(o_.random_accesses / uint64_t(items), 1024);
        const double s = best_seconds(threads, [&](thread_pool& p) {
            p.parallel_for(items, [&](int th, int64_t a, int64_t b) {
                uint64_t acc = 0;
                for (int64_t it = a; it < b; it++) {
                    rng64 g{uint64_t(it) * 0x9E3779B97F4A7C15ull + 12345};
                    for (uint64_t k = 0; k < per_item; k++) {
                        const uint64_t x = g.next();
                        const size_t line =
                            (x & 0xff) < hot_cut ? hot_base + ((x >> 8) & (hot_lines - 1)) : size_t(x >> 20) & mask;
                        acc += sum_line(r.data() + line * k_line);
                    }
                }
                sink(th) ^= acc;
            });
        });
        const double accesses = double(per_item) * double(items);
        return {name, threads, accesses * k_line / s / 1e9, s * threads / accesses * 1e9, r.bytes(), ""};
    }

    void random_patterns(probe_result& out) {
        say(fmt::format("random 64-byte reads and hot-spot over {} MiB", o_.random_bytes >> 20));
        region r(o_.random_bytes, region::pages::default_pages);
        touch(r, pooln_);
        for (int t : thread_counts()) out.bandwidth.push_back(random_reads(r, t, "random", 0.0));
        for (int t : thread_counts()) {
            auto b = random_reads(r, t, "hotspot", 0.8);
            b.note = "80 % in 16 KiB";
            out.bandwidth.push_back(b);
        }
    }

    void tiles(probe_result& out) {
        // An n x n matrix of f32 read as 16x16 tiles (16 rows of one 64-byte line each), tile rows split across
        // threads: the walk of a blocked weight layout.
        size_t n = 16;
        while ((n * 2) * (n * 2) * 4 <= o_.tile_bytes) n *= 2;
        say(fmt::format("2-D tiles over a {}x{} f32 matrix", n, n));
        region r(n * n * 4, region::pages::default_pages);
        touch(r, pooln_);
        const size_t row_bytes = n * 4;
        for (int t : thread_counts()) {
            const double s = best_seconds(t, [&](thread_pool& p) {
                p.parallel_for(int64_t(n / 16), [&](int th, int64_t a, int64_t b) {
                    uint64_t acc = 0;
                    for (int64_t tr = a; tr < b; tr++)
                        for (size_t tc = 0; tc < row_bytes; tc += k_line)
                            for (size_t rr = 0; rr < 16; rr++)
                                acc += sum_line(r.data() + (size_t(tr) * 16 + rr) * row_bytes + tc);
                    sink(th) ^= acc;
                });
            });
            out.bandwidth.push_back({"tile2d", t, double(n * n * 4) / s / 1e9, 0, n * n * 4, "16x16 f32 tiles"});
        }
    }

    // Builds one random cycle through the first `lines` lines of r (each line holds the index of the next) and
    // returns the mean time of a dependent load.
    double chase(const region& r, size_t lines, uint64_t loads, std::vector<uint32_t>& order) {
        order.resize(lines);
        std::iota(order.begin(), order.end(), 0u);
        rng64 g{0x1234567 + lines};
        for (size_t i = lines - 1; i > 0; i--) std::swap(order[i], order[g.next() % i]);  // one cycle (Sattolo)
        auto* base = reinterpret_cast<uint64_t*>(r.data());
        for (size_t i = 0; i < lines; i++) base[size_t(order[i]) * 8] = order[(i + 1) % lines];
        uint64_t idx = order[0];
        for (uint64_t k = 0; k < std::min<uint64_t>(lines, loads); k++) idx = base[idx * 8];  // warm the caches
        const auto t0 = clock_type::now();
        for (uint64_t k = 0; k < loads; k++) idx = base[idx * 8];
        const double s = seconds_since(t0);
        sink(0) ^= idx;
        return s / double(loads) * 1e9;
    }

    void ladder(probe_result& out) {
        say(fmt::format("latency ladder 4 KiB .. {} MiB", o_.ladder_max >> 20));
        region r(o_.ladder_max, region::pages::default_pages);
        touch(r, pool1_);
        std::vector<uint32_t> order;
        for (size_t b = 4096; b <= o_.ladder_max; b *= 2) {
            out.ladder.push_back({b, chase(r, b / k_line, o_.chase_loads, order)});
            const size_t mid = b + b / 2;
            if (mid <= o_.ladder_max && mid <= (size_t(64) << 20))
                out.ladder.push_back({mid, chase(r, mid / k_line, o_.chase_loads, order)});
        }
    }

    void page_sizes(probe_result& out) {
        say(fmt::format("random reads on 4 KiB vs 2 MiB pages over {} MiB", o_.random_bytes >> 20));
        std::vector<uint32_t> order;
        for (const auto kind : {region::pages::small_only, region::pages::huge}) {
            const bool huge = kind == region::pages::huge;
            region r(o_.random_bytes, kind);
            touch(r, pool1_);
            std::string note;
            if (const auto hb = r.huge_bytes())
                note = fmt::format("{} of {} MiB in 2 MiB pages", *hb >> 20, r.bytes() >> 20);
            else
                note = "huge-page coverage unavailable (/proc/self/smaps unreadable)";
            if (huge) out.huge_note = note;
            for (int t : thread_counts()) {
                auto b = random_reads(r, t, huge ? "random_2m_pages" : "random_4k_pages", 0.0);
                b.note = note;
                out.bandwidth.push_back(b);
            }
            (huge ? out.page_chase_ns_2m : out.page_chase_ns_4k) =
                chase(r, r.bytes() / k_line, o_.chase_loads / 2, order);
        }
    }

    uint64_t& sink(int th) { return sinks_[size_t(th % 64) * 8]; }

private:
    probe_options o_;
    std::function<void(const std::string&)> progress_;
    thread_pool pool1_, pooln_;
    std::vector<uint64_t> sinks_ = std::vector<uint64_t>(64 * 8);
};

}  // namespace

probe_options probe_options::quick(int threads) {
    probe_options o;
    o.threads = threads;
    o.stream_bytes = size_t(256) << 20;
    o.random_bytes = size_t(32) << 20;
    o.tile_bytes = size_t(64) << 20;
    o.ladder_max = size_t(64) << 20;
    o.chase_loads = uint64_t(1) << 18;
    o.random_accesses = uint64_t(1) << 21;
    o.reps = 3;
    return o;
}

double probe_result::read_gbps(int n_threads) const {
    double best = 0;
    for (const auto& b : bandwidth)
        if ((b.test == "read" || b.test == "read_best") && b.threads == n_threads) best = std::max(best, b.gbps);
    return best;
}

double probe_result::plain_read_gbps(int n_threads) const {
    double best = 0;
    for (const auto& b : bandwidth)
        if (b.test == "read" && b.threads == n_threads) best = std::max(best, b.gbps);
    return best;
}

probe_result run_probe(const probe_options& opts, const std::function<void(const std::string&)>& progress) {
    probe_options o = opts;
    if (o.threads <= 0) o.threads = thread_pool::default_threads();
    if (o.stream_bytes < (size_t(1) << 20) || o.random_bytes < (size_t(1) << 20) || o.ladder_max < 8192)
        fail("probe", "sizes too small: stream {} B, random {} B, ladder {} B", o.stream_bytes, o.random_bytes,
             o.ladder_max);
    if (o.ladder_max / k_line > 0xffffffffull) fail("probe", "latency ladder larger than 256 GiB");
    const auto t0 = clock_type::now();
    probe_result r;
    r.threads = o.threads;
    prober p(o, progress);
    p.streaming(r);
    p.random_patterns(r);
    p.tiles(r);
    p.page_sizes(r);
    p.ladder(r);
    r.seconds = seconds_since(t0);
    return r;
}

}  // namespace memtile
