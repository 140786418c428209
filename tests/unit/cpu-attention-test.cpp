// CPU attention (backends/cpu/attention.cpp) on every ISA path against a plain double-precision reference computed
// here from the cache's own rows: decode (one token, the chunked path) and prefill blocks (the tiled path), f16 and
// f32 caches, MHA / GQA / MQA, head sizes that fit the AVX-512 loops (multiples of 16), only AVX2's (40) or none
// (12, portable loops), and key counts around the block and chunk edges.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/attention-kernels.h"
#include "backends/cpu/cpu-isa.h"
#include "backends/cpu/ops.h"
#include "core/fp16.h"
#include "core/thread-pool.h"
#include "kv/kv-cache.h"

namespace memtile {
namespace {

struct shape {
    int n_head, n_kv, hd;
};

struct isa_guard {
    explicit isa_guard(cpu::isa i) { cpu::force_isa(i); }
    ~isa_guard() { cpu::force_isa("auto"); }
};

// The cache's element d of a row, as stored (f16 rounded).
double cached(const kv_cache& kv, const uint8_t* row, int d) {
    return kv.type() == dtype::f16 ? double(fp16_to_f32(reinterpret_cast<const uint16_t*>(row)[d]))
                                   : double(reinterpret_cast<const float*>(row)[d]);
}

// Softmax(q k^T / sqrt(hd)) v per head and token, causal, in double.
std::vector<double> reference(const std::vector<float>& q, int n_tok, int pos0, const kv_cache& kv, int layer,
                              const shape& s) {
    std::vector<double> out(q.size());
    const int group = s.n_head / s.n_kv;
    const size_t eb = kv.elem_bytes();
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < s.n_head; h++) {
            const int kvh = h / group, n = pos0 + t + 1;
            const float* qh = &q[(size_t(t) * s.n_head + h) * s.hd];
            std::vector<double> sc(static_cast<size_t>(n));
            double mx = -INFINITY;
            for (int j = 0; j < n; j++) {
                const uint8_t* kr = kv.k_row(uint32_t(layer), uint32_t(j)) + size_t(kvh) * s.hd * eb;
                double dot = 0;
                for (int d = 0; d < s.hd; d++) dot += double(qh[d]) * cached(kv, kr, d);
                sc[size_t(j)] = dot / std::sqrt(double(s.hd));
                mx = std::max(mx, sc[size_t(j)]);
            }
            double sum = 0;
            for (auto& x : sc) sum += (x = std::exp(x - mx));
            double* o = &out[(size_t(t) * s.n_head + h) * s.hd];
            for (int j = 0; j < n; j++) {
                const uint8_t* vr = kv.v_row(uint32_t(layer), uint32_t(j)) + size_t(kvh) * s.hd * eb;
                for (int d = 0; d < s.hd; d++) o[d] += sc[size_t(j)] / sum * cached(kv, vr, d);
            }
        }
    return out;
}

double nmse(const std::vector<float>& got, const std::vector<double>& want) {
    double err = 0, ref = 0;
    for (size_t i = 0; i < got.size(); i++) {
        err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        ref += want[i] * want[i];
    }
    return err / ref;
}

// A two-layer cache of n_pos positions with random rows (layer 1 is the one attended, so layer offsets count).
kv_cache random_cache(const shape& s, int n_pos, dtype type, uint32_t seed) {
    kv_cache kv(2, uint32_t(n_pos), uint32_t(s.n_kv * s.hd), type);
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> k(size_t(s.n_kv * s.hd)), v(k.size());
    for (uint32_t l = 0; l < 2; l++)
        for (int p = 0; p < n_pos; p++) {
            for (auto& x : k) x = 2.0f * nd(rng);  // peaky enough that the softmax does not average everything out
            for (auto& x : v) x = nd(rng);
            kv.store(l, uint32_t(p), k.data(), v.data());
        }
    kv.used = uint32_t(n_pos);
    return kv;
}

std::vector<float> random_q(const shape& s, int n_tok, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> q(size_t(n_tok) * s.n_head * s.hd);
    for (auto& x : q) x = nd(rng);
    return q;
}

const shape k_shapes[] = {{4, 4, 64}, {8, 2, 64}, {32, 8, 64}, {8, 1, 128},
                          {6, 2, 96}, {4, 2, 80}, {4, 2, 40},  {2, 1, 12}};

TEST(cpu_attention, every_isa_path_matches_the_reference) {
    thread_pool pool(2);
    for (cpu::isa i : cpu::all_isas()) {
        if (!cpu::isa_supported(i)) continue;
        isa_guard guard(i);
        for (const shape& s : k_shapes)
            for (dtype type : {dtype::f16, dtype::f32})
                for (int n_keys : {1, 7, 16, 17, 128, 129, 300}) {
                    const std::string what = std::string(cpu::isa_name(i)) + " heads " + std::to_string(s.n_head) +
                                             "/" + std::to_string(s.n_kv) + " hd " + std::to_string(s.hd) + " " +
                                             (type == dtype::f16 ? "f16" : "f32") + " keys " + std::to_string(n_keys);
                    const kv_cache kv = random_cache(s, n_keys, type, uint32_t(n_keys * 31 + s.hd));
                    // Decode: one token at the last position.
                    const auto q1 = random_q(s, 1, uint32_t(n_keys));
                    std::vector<float> out1(q1.size());
                    cpu::attention(q1.data(), out1.data(), 1, n_keys - 1, kv, 1, s.n_head, s.n_kv, s.hd, pool);
                    EXPECT_LE(nmse(out1, reference(q1, 1, n_keys - 1, kv, 1, s)), 1e-10) << "decode " << what;
                    // Prefill: the last min(n_keys, 5) positions as one block.
                    const int n_tok = std::min(n_keys, 5);
                    const auto qn = random_q(s, n_tok, uint32_t(n_keys + 1));
                    std::vector<float> outn(qn.size());
                    cpu::attention(qn.data(), outn.data(), n_tok, n_keys - n_tok, kv, 1, s.n_head, s.n_kv, s.hd, pool);
                    EXPECT_LE(nmse(outn, reference(qn, n_tok, n_keys - n_tok, kv, 1, s)), 1e-10) << "prefill " << what;
                }
    }
}

// The decode splits the keys into fixed chunks over the threads: 1, 2 and 3 threads give the same bits.
TEST(cpu_attention, decode_is_the_same_for_any_thread_count) {
    const shape s{8, 2, 64};
    const int n_keys = 3 * cpu::detail::k_decode_chunk + 5;
    const kv_cache kv = random_cache(s, n_keys, dtype::f16, 5);
    const auto q = random_q(s, 1, 6);
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
        thread_pool pool(threads);
        std::vector<float> out(q.size());
        cpu::attention(q.data(), out.data(), 1, n_keys - 1, kv, 1, s.n_head, s.n_kv, s.hd, pool);
        if (first.empty())
            first = out;
        else
            EXPECT_EQ(0, std::memcmp(first.data(), out.data(), out.size() * sizeof(float))) << threads << " threads";
    }
}

}  // namespace
}  // namespace memtile
