// Does arithmetic between the loads of a sequential read slow the read from DRAM, even where that arithmetic is
// far from being the bottleneck? The decode kernels are such reads: two streams of weights, a few vector operations
// per 32 bytes, faster than DRAM when their bytes are in L2 (docs/cpu.md, "Session 22").
//   bench-read-work [--mib 256] [--rounds 9]
// Every variant reads a buffer of 2 MiB pages as two halves in lockstep (128 bytes of each per step, four 256-bit
// loads), one thread, with W operations of a kind after every load, or with a second operand read from L1. Each round
// measures every variant in turn: one pass over the whole buffer (DRAM) and 200 passes over its first 512 KiB (L2).
// Two more variants read by AMX tile loads where the CPU has AMX. Prints per variant the medians over rounds and the
// median ratio to the loads-only loop of the same round; then the same read with the two runs D bytes apart for
// several D (what the distance between a decode's runs costs).
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/cpu-isa.h"
#include "guarded-main.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace {

enum class work { none, vpaddd, vpdpbusd, scalar, nops, l1_loads, activations };

// A second, L1-resident operand: l1_loads read it at 96 bytes per 32-byte weight load, wrapping at 4 KiB (a stream
// of L1 hits three times as fast as the weights); activations read 32 bytes of its first 2 KiB per 128 bytes of each
// half, wrapping, as the K-quant decode kernels read their activations (shared by the two streams).
alignas(4096) uint8_t g_side[4096];

// Sums the halves [a, a + h) and [b, b + h) (h a multiple of 128) with W operations of kind K after every 32-byte
// load: vector ops form a chain on the loaded vector, scalar ones chains on four registers, nops are 4 per step.
template <work K, int W>
__attribute__((target("avx2"), noinline)) uint64_t read_pair(const uint8_t* a, const uint8_t* b, size_t h) {
    __m256i acc[4] = {};
    const __m256i ones = _mm256_set1_epi8(1);
    uint64_t g0 = 1, g1 = 2, g2 = 3, g3 = 4;
    size_t side = 0;
    for (size_t o = 0; o < h; o += 128) {
        __m256i x = ones;
        if constexpr (K == work::activations) {
            x = _mm256_load_si256(reinterpret_cast<const __m256i*>(g_side + side));
            side = (side + 32) % 2048;
        }
        for (const uint8_t* p : {a + o, b + o})
            for (int k = 0; k < 4; k++) {
                __m256i t = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32 * k));
                const __m256i v = t;
                if constexpr (K == work::activations) t = _mm256_add_epi32(t, x);
                for (int w = 0; w < W; w++) {
                    if constexpr (K == work::vpaddd) t = _mm256_add_epi32(t, ones);
                    // AVX-512 VNNI on 256-bit registers (as the decode kernels use it), by asm so that the rest of
                    // the bench needs only AVX2; run only where the CPU has it.
                    if constexpr (K == work::vpdpbusd)
                        asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(t) : "v"(v), "v"(ones));
                    if constexpr (K == work::scalar) {
                        g0 = g0 * 3 + uint64_t(w);
                        g1 = g1 * 5 + uint64_t(w);
                        g2 ^= g1 >> 3;
                        g3 += g0;
                        asm volatile("" : "+r"(g0), "+r"(g1), "+r"(g2), "+r"(g3));
                    }
                    if constexpr (K == work::nops) asm volatile("nop; nop; nop; nop");
                    if constexpr (K == work::l1_loads) {
                        t = _mm256_xor_si256(
                            t, _mm256_load_si256(reinterpret_cast<const __m256i*>(g_side + ((side + 32 * w) & 4064))));
                        side += 96;
                    }
                }
                acc[k] = K == work::none ? _mm256_xor_si256(acc[k], t) : _mm256_add_epi32(acc[k], t);
            }
    }
    const __m256i s = _mm256_xor_si256(_mm256_xor_si256(acc[0], acc[1]), _mm256_xor_si256(acc[2], acc[3]));
    return uint64_t(_mm256_extract_epi64(s, 0)) ^ uint64_t(_mm256_extract_epi64(s, 3)) ^ g0 ^ g1 ^ g2 ^ g3;
}

// The same two halves read by AMX tile loads (16 rows of 64 bytes, 1 KiB, from each half per step), alone (TDP false)
// or each consumed by a one-token tile product (TDPBSSD of a 1 x 64 A against the 1 KiB as B, 16 x 64): what a decode
// on AMX would ask of the memory system. Runs only where cpu::amx_usable().
struct amx_config {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

template <bool TDP>
__attribute__((target("avx2,amx-tile,amx-int8"), noinline)) uint64_t read_tiles(const uint8_t* a, const uint8_t* b,
                                                                                size_t h) {
    amx_config cfg;
    for (int t = 0; t < 5; t++) {
        cfg.rows[t] = t < 2 ? 16 : 1;  // 0, 1: B (16 x 64); 2, 4: C (1 x 16 int32); 3: A (1 x 64)
        cfg.colsb[t] = 64;
    }
    asm volatile("ldtilecfg %0" : : "m"(cfg));
    alignas(64) int8_t x[64];
    for (int i = 0; i < 64; i++) x[i] = int8_t(i - 32);
    _tile_loadd(3, x, 64);
    _tile_zero(2);
    _tile_zero(4);
    for (size_t o = 0; o < h; o += 1024) {
        _tile_loadd(0, a + o, 64);
        _tile_loadd(1, b + o, 64);
        if constexpr (TDP) {
            _tile_dpbssd(2, 3, 0);
            _tile_dpbssd(4, 3, 1);
        }
    }
    alignas(64) int32_t c[2][16];
    _tile_stored(2, c[0], 64);
    _tile_stored(4, c[1], 64);
    _tile_release();
    return uint64_t(c[0][0]) ^ uint64_t(c[1][5]);
}

struct variant {
    const char* name;
    uint64_t (*fn)(const uint8_t*, const uint8_t*, size_t);
    bool needs_vnni, needs_amx = false;
};

const variant k_variants[] = {
    {"loads only (xor)", read_pair<work::none, 0>, false},
    {"+1 vpaddd per load", read_pair<work::vpaddd, 1>, false},
    {"+4 vpaddd per load", read_pair<work::vpaddd, 4>, false},
    {"+1 vpdpbusd per load", read_pair<work::vpdpbusd, 1>, true},
    {"+4 vpdpbusd per load", read_pair<work::vpdpbusd, 4>, true},
    {"+1 x 4 scalar ops per load", read_pair<work::scalar, 1>, false},
    {"+4 x 4 nops per load", read_pair<work::nops, 4>, false},
    {"+1 L1-hit load per load (a 4 KiB side stream)", read_pair<work::l1_loads, 1>, false},
    {"+1 vpaddd per load, activations as the kernels", read_pair<work::activations, 0>, false},
    {"AMX tile loads (1 KiB of each half per step)", read_tiles<false>, false, true},
    {"AMX tile loads + a 1-token TDPBSSD per tile", read_tiles<true>, false, true},
    {"loads only (xor) again", read_pair<work::none, 0>, false},
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// A whole positive number, or an error naming the option (no silent fallback for "x" or "0").
int positive(const char* s, const char* option) {
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < 1 || v > 1 << 20)
        throw std::runtime_error(std::string(option) + " wants a positive whole number, not '" + s + "'");
    return int(v);
}

int run(int argc, char** argv) {
    size_t mib = 256;
    int rounds = 9;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--mib" && i + 1 < argc) {
            mib = size_t(positive(argv[++i], "--mib"));
            if (mib < 4) throw std::runtime_error("--mib wants at least 4 (the distance table reads pairs of 1.2 MB)");
        } else if (a == "--rounds" && i + 1 < argc)
            rounds = positive(argv[++i], "--rounds");
        else {
            std::fprintf(stderr, "usage: bench-read-work [--mib 256] [--rounds 9]\n");
            return 2;
        }
    }
    if (!__builtin_cpu_supports("avx2")) {
        std::printf("bench-read-work: needs AVX2\n");
        return 0;
    }
    const bool vnni = __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    const bool amx = memtile::cpu::amx_usable();
    constexpr size_t huge = size_t(2) << 20, l2_bytes = size_t(512) << 10;
    const size_t bytes = mib << 20;
    void* map = mmap(nullptr, bytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) throw std::runtime_error("cannot map the buffer");
    auto* buf = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(map) + huge - 1) & ~(huge - 1));
    madvise(buf, bytes, MADV_HUGEPAGE);
    std::memset(buf, 1, bytes);
    const auto now = [] { return std::chrono::steady_clock::now(); };
    const auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
    const size_t n = std::size(k_variants);
    std::vector<std::vector<double>> dram(n), l2(n), ratio(n);
    uint64_t sink = 0;
    for (int r = 0; r < rounds; r++) {
        std::vector<double> round(n, 0.0);
        for (size_t i = 0; i < n; i++) {
            if ((k_variants[i].needs_vnni && !vnni) || (k_variants[i].needs_amx && !amx)) continue;
            auto t0 = now();
            sink += k_variants[i].fn(buf, buf + bytes / 2, bytes / 2);
            round[i] = double(bytes) / secs(now() - t0) / 1e9;
            t0 = now();
            for (int rep = 0; rep < 200; rep++) sink += k_variants[i].fn(buf, buf + l2_bytes / 2, l2_bytes / 2);
            l2[i].push_back(200.0 * double(l2_bytes) / secs(now() - t0) / 1e9);
            dram[i].push_back(round[i]);
        }
        for (size_t i = 0; i < n; i++)
            if (round[i] > 0) ratio[i].push_back(round[i] / round[0]);
    }
    // The two runs' distance: the buffer as pairs of adjacent D-byte chunks, each pair read in lockstep (runs D
    // apart, restarting every 2 D bytes), bare and with +4 vpdpbusd (where the CPU has it: else +4 vpaddd).
    const size_t distances[] = {9472, 37888, 69632, 270336, 1212416, bytes / 2};  // 9472: adjacent x8 Q4_K groups
    const auto work_fn = vnni ? read_pair<work::vpdpbusd, 4> : read_pair<work::vpaddd, 4>;
    std::vector<std::vector<double>> dist_bare(std::size(distances)), dist_work(std::size(distances));
    for (int r = 0; r < rounds; r++)
        for (size_t i = 0; i < std::size(distances); i++) {
            const size_t d = distances[i] / 128 * 128, pairs = bytes / (2 * d);
            for (int w = 0; w < 2; w++) {
                const auto fn = w ? work_fn : read_pair<work::none, 0>;
                const auto t0 = now();
                for (size_t c = 0; c < pairs; c++) sink += fn(buf + 2 * d * c, buf + 2 * d * c + d, d);
                (w ? dist_work : dist_bare)[i].push_back(double(2 * d * pairs) / secs(now() - t0) / 1e9);
            }
        }
    munmap(map, bytes + huge);
    std::printf("two halves of %zu MiB in lockstep, 1 thread, medians of %d rounds (checksum %llu)\n\n", mib, rounds,
                static_cast<unsigned long long>(sink & 0xff));
    std::printf("| loop | DRAM GB/s | ratio to loads only | L2 GB/s (512 KiB) |\n|---|---|---|---|\n");
    for (size_t i = 0; i < n; i++) {
        if (dram[i].empty()) {
            std::printf("| %s | (no %s) | | |\n", k_variants[i].name, k_variants[i].needs_amx ? "AMX" : "AVX-512 VNNI");
            continue;
        }
        std::printf("| %s | %.2f | %.3f | %.1f |\n", k_variants[i].name, median(dram[i]), median(ratio[i]),
                    median(l2[i]));
    }
    std::printf("\nthe two runs D bytes apart (pairs of adjacent D-byte chunks), DRAM GB/s, medians:\n\n");
    std::printf("| D | loads only | +4 %s per load |\n|---|---|---|\n", vnni ? "vpdpbusd" : "vpaddd");
    for (size_t i = 0; i < std::size(distances); i++)
        std::printf("| %zu | %.2f | %.2f |\n", distances[i], median(dist_bare[i]), median(dist_work[i]));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, run);
}
#else
int main() {
    std::printf("bench-read-work: x86-64 only\n");
    return 0;
}
#endif
