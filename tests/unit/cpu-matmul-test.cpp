// Op test of the CPU matmul: every instruction-set path (cpu-isa.h) against matmul_ref for every weight
// format with an optimized kernel, on ragged shapes (n_out not a multiple of the row group, 1..67 tokens,
// n_in from one block up; the per-row kernels and, from k_gemm_min_tokens on, the prefill GEMM), with repack on and off
// and 1 and 2 threads. Quantized weights are compared with the f32-activation reference, so the tolerance covers the
// on-the-fly activation quantization (Q8_0/Q8_K).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu-isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/repack.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "quant/quant.h"

using namespace memtile;
using namespace memtile::cpu;

namespace {

struct format_case {
    dtype type;
    double max_nmse;
    std::vector<int64_t> n_in;  // multiples of the block, the smallest first
};

// Row lengths cover, for the prefill GEMM (avx2/gemm-avx2*.{h,cpp}): float rows with a scalar tail (13), a
// tail unit after the last whole group of 4 (40, 520), several K slices of 2048 elements with a short last
// slice, a tail unit and a scalar tail (4363; with 37 rows also several row blocks); Q8_0/Q4_0 with tail
// blocks and several slices of 32 blocks (1120); K formats over several super-blocks (2304).
const format_case k_formats[] = {
    {dtype::f32, 1e-6, {1, 13, 40, 520, 1056, 4363}},
    {dtype::f16, 1e-6, {1, 13, 40, 520, 1056, 4363}},
    {dtype::bf16, 1e-6, {1, 13, 40, 520, 1056, 4363}},
    {dtype::q8_0, 1e-4, {32, 96, 544, 1120}},
    {dtype::q4_0, 1e-4, {32, 96, 544, 1120}},
    {dtype::q4_k, 1e-4, {256, 768, 2304}},
    {dtype::q5_k, 1e-4, {256, 768, 2304}},
    {dtype::q6_k, 1e-4, {256, 768, 2304}},
};

// n_out: ragged against the row group (16) and the GEMM panel (4 rows); n_tok: decode, the per-row tiles
// (< k_gemm_min_tokens) and the GEMM with ragged token tiles and more than one 63-token block (64, 67).
const int64_t k_n_out[] = {1, 7, 37};
const int64_t k_n_tok[] = {1, 3, 4, 5, 7, 17, 33, 64, 67};

// Restores automatic path selection when a test ends, whatever it forced.
struct isa_guard {
    explicit isa_guard(isa i) { force_isa(i); }
    ~isa_guard() { force_isa("auto"); }
};

std::vector<float> uniform(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& f : v) f = dist(rng);
    return v;
}

// Squared error over the expected squared magnitude of each output: the sum over outputs of
// sum_i (W[o][i] * x[t][i])^2, which is E[y^2] for uncorrelated random data. Plain sum(y_ref^2) would turn
// a chance cancellation in a single dot product (n_out = n_tok = 1) into a huge "relative" error.
double nmse(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& w,
            const std::vector<float>& x, int64_t n_in, int64_t n_out, int64_t n_tok) {
    double err = 0, ref = 0;
    for (int64_t t = 0; t < n_tok; t++) {
        for (int64_t o = 0; o < n_out; o++) {
            const size_t k = size_t(t * n_out + o);
            err += (double(got[k]) - want[k]) * (double(got[k]) - want[k]);
            for (int64_t i = 0; i < n_in; i++) {
                const double p = double(w[size_t(o * n_in + i)]) * x[size_t(t * n_in + i)];
                ref += p * p;
            }
        }
    }
    return ref > 0 ? err / ref : err;
}

std::vector<uint8_t> encode(dtype t, const std::vector<float>& w, int64_t n_out, int64_t n_in) {
    if (t != dtype::f32) return quantize_tensor(t, w.data(), n_out, n_in);
    std::vector<uint8_t> bytes(w.size() * sizeof(float));
    std::memcpy(bytes.data(), w.data(), bytes.size());
    return bytes;
}

using param = std::tuple<isa, format_case>;

class cpu_matmul : public testing::TestWithParam<param> {};

TEST_P(cpu_matmul, matches_reference) {
    const auto& [path, fc] = GetParam();
    if (!isa_supported(path)) GTEST_SKIP() << isa_name(path) << " path skipped: " << isa_missing_reason(path);
    isa_guard guard(path);
    thread_pool pool1(1), pool2(2);
    for (int64_t n_in : fc.n_in) {
        for (int64_t n_out : k_n_out) {
            const std::vector<float> wf = uniform(size_t(n_in * n_out), uint32_t(n_in * 31 + n_out));
            const std::vector<uint8_t> wq = encode(fc.type, wf, n_out, n_in);
            const std::vector<float> wd = dequantize_tensor(fc.type, wq.data(), n_out, n_in);
            const weight_view view{fc.type, wq.data(), n_in, n_out, size_t(row_bytes(fc.type, uint64_t(n_in)))};
            for (int64_t n_tok : k_n_tok) {
                const std::vector<float> x = uniform(size_t(n_in * n_tok), uint32_t(n_tok * 7 + n_in));
                std::vector<float> want(size_t(n_out * n_tok));
                matmul_ref(view, x.data(), n_tok, want.data(), 0, n_out);
                for (bool repack : {false, true}) {
                    const auto pw = prepare_weight(view, {.repack = repack});
                    // The interleaved layout must really be the one under test where it exists.
                    if (repack && path != isa::scalar && repack::supported(fc.type)) {
                        EXPECT_GT(pw->resident_bytes(), 0u) << dtype_name(fc.type) << " was not repacked";
                    }
                    for (thread_pool* pool : {&pool1, &pool2}) {
                        std::vector<float> got(want.size(), NAN);
                        matmul(*pw, x.data(), n_tok, got.data(), *pool);
                        const double e = nmse(got, want, wd, x, n_in, n_out, n_tok);
                        EXPECT_LE(e, fc.max_nmse)
                            << dtype_name(fc.type) << " via " << isa_name(path) << ": n_in " << n_in << " n_out "
                            << n_out << " n_tok " << n_tok << " repack " << repack << " threads " << pool->size();
                    }
                }
            }
        }
    }
}

// Each token's result must not depend on which other tokens share the call: continuous batching runs the
// decode steps of several sequences as one matmul, and a sequence must get exactly the logits it would get
// alone (bit for bit), so greedy outputs do not depend on server load.
TEST_P(cpu_matmul, tokens_are_independent_of_the_batch) {
    const auto& [path, fc] = GetParam();
    if (!isa_supported(path)) GTEST_SKIP() << isa_name(path) << " path skipped: " << isa_missing_reason(path);
    isa_guard guard(path);
    thread_pool pool(2);
    const int64_t n_in = fc.n_in.back(), n_out = 37;
    const std::vector<float> wf = uniform(size_t(n_in * n_out), 5);
    const std::vector<uint8_t> wq = encode(fc.type, wf, n_out, n_in);
    const weight_view view{fc.type, wq.data(), n_in, n_out, size_t(row_bytes(fc.type, uint64_t(n_in)))};
    for (bool repack : {false, true}) {
        const auto pw = prepare_weight(view, {.repack = repack});
        for (int64_t n_tok : {2, 3, 4, 5, 8, 9, 17, 67}) {
            const std::vector<float> x = uniform(size_t(n_in * n_tok), uint32_t(n_tok));
            std::vector<float> all(static_cast<size_t>(n_out * n_tok)), one(static_cast<size_t>(n_out));
            matmul(*pw, x.data(), n_tok, all.data(), pool);
            for (int64_t t = 0; t < n_tok; t++) {
                matmul(*pw, x.data() + t * n_in, 1, one.data(), pool);
                for (int64_t o = 0; o < n_out; o++)
                    ASSERT_EQ(one[size_t(o)], all[size_t(t * n_out + o)])
                        << dtype_name(fc.type) << " via " << isa_name(path) << ": token " << t << " of " << n_tok
                        << " repack " << repack;
            }
        }
    }
}

// Long rows shrink the GEMM's integer token block (about 256 KiB of int8 activations: 32 tokens at 8192) and
// the float formats' block is about 63 tokens (blocks are balanced: 130 tokens make 2 of 66 or 4 of 33), so
// 130 tokens cross token blocks for every format; checked against the reference and, bit for bit, against
// each token computed alone.
TEST_P(cpu_matmul, long_rows_cross_token_blocks) {
    const auto& [path, fc] = GetParam();
    if (!isa_supported(path)) GTEST_SKIP() << isa_name(path) << " path skipped: " << isa_missing_reason(path);
    isa_guard guard(path);
    thread_pool pool(2);
    const int64_t n_in = 8192, n_out = 9, n_tok = 130;
    const std::vector<float> wf = uniform(size_t(n_in * n_out), 11);
    const std::vector<uint8_t> wq = encode(fc.type, wf, n_out, n_in);
    const std::vector<float> wd = dequantize_tensor(fc.type, wq.data(), n_out, n_in);
    const weight_view view{fc.type, wq.data(), n_in, n_out, size_t(row_bytes(fc.type, uint64_t(n_in)))};
    const std::vector<float> x = uniform(size_t(n_in * n_tok), 12);
    std::vector<float> want(static_cast<size_t>(n_out * n_tok)), one(static_cast<size_t>(n_out));
    matmul_ref(view, x.data(), n_tok, want.data(), 0, n_out);
    // The x8 layout's prefill runs token blocks of about 256 KiB of activations too (matmul.cpp).
    for (bool repack : {false, true}) {
        const auto pw = prepare_weight(view, {.repack = repack});
        std::vector<float> got(want.size(), NAN);
        matmul(*pw, x.data(), n_tok, got.data(), pool);
        EXPECT_LE(nmse(got, want, wd, x, n_in, n_out, n_tok), fc.max_nmse)
            << dtype_name(fc.type) << " repack " << repack;
        for (int64_t t = 0; t < n_tok; t++) {
            matmul(*pw, x.data() + t * n_in, 1, one.data(), pool);
            for (int64_t o = 0; o < n_out; o++)
                ASSERT_EQ(one[size_t(o)], got[size_t(t * n_out + o)])
                    << dtype_name(fc.type) << " via " << isa_name(path) << ": token " << t << " row " << o << " repack "
                    << repack;
        }
    }
}

// Decode of long rows with software prefetch (the float formats' K-chunked kernel, prefetch stopping at each
// thread's last row; the repacked layouts ignore the setting) must give the results of the plain per-row / per-group
// kernels (set_decode_prefetch(0)) bit for bit, whatever the distance. Float rows of 5645 elements: two K
// chunks, a tail unit and a scalar tail.
TEST_P(cpu_matmul, decode_prefetch_does_not_change_results) {
    const auto& [path, fc] = GetParam();
    if (!isa_supported(path)) GTEST_SKIP() << isa_name(path) << " path skipped: " << isa_missing_reason(path);
    isa_guard guard(path);
    thread_pool pool1(1), pool2(2);
    const int64_t n_in = fc.n_in.front() == 1 ? 5645 : 8192, n_out = 37;
    const std::vector<float> wf = uniform(size_t(n_in * n_out), 31);
    const std::vector<uint8_t> wq = encode(fc.type, wf, n_out, n_in);
    const weight_view view{fc.type, wq.data(), n_in, n_out, size_t(row_bytes(fc.type, uint64_t(n_in)))};
    const std::vector<float> x = uniform(size_t(n_in), 32);
    for (bool repack : {false, true}) {
        const auto pw = prepare_weight(view, {.repack = repack});
        set_decode_prefetch(0);
        std::vector<float> want(static_cast<size_t>(n_out));
        matmul(*pw, x.data(), 1, want.data(), pool1);
        for (int64_t distance : {int64_t(64), int64_t(4096), k_default_decode_prefetch, int64_t(1) << 20}) {
            set_decode_prefetch(distance);
            for (thread_pool* pool : {&pool1, &pool2}) {
                std::vector<float> got(want.size(), NAN);
                matmul(*pw, x.data(), 1, got.data(), *pool);
                for (size_t o = 0; o < want.size(); o++)
                    ASSERT_EQ(want[o], got[o]) << dtype_name(fc.type) << " via " << isa_name(path) << " repack "
                                               << repack << " prefetch " << distance << " row " << o;
            }
        }
        set_decode_prefetch(k_default_decode_prefetch);
    }
}

// Decode over several group streams (set_decode_streams: the x8 layouts take 2 or 4, the float x32 layouts 2; the
// others ignore it) must give the results of one group at a time bit for bit: odd and even group counts (37 rows: 5
// groups, 200: 25, 256: 32; with 4 streams 1 or 0 groups left over), odd block counts (1120: 35 blocks), 1 and 2
// threads (each thread walks its streams inside its own chunks), several distances (1 MiB: fewer streams or one), the
// starts staggered or not (set_decode_stream_stagger: shorter runs, more groups left over for one stream).
TEST_P(cpu_matmul, decode_streams_do_not_change_results) {
    const auto& [path, fc] = GetParam();
    if (!isa_supported(path)) GTEST_SKIP() << isa_name(path) << " path skipped: " << isa_missing_reason(path);
    isa_guard guard(path);
    thread_pool pool1(1), pool2(2);
    for (int64_t n_out : {int64_t(37), int64_t(200), int64_t(256)}) {
        const int64_t n_in = fc.n_in.back();
        const std::vector<float> wf = uniform(size_t(n_in * n_out), 41);
        const std::vector<uint8_t> wq = encode(fc.type, wf, n_out, n_in);
        const weight_view view{fc.type, wq.data(), n_in, n_out, size_t(row_bytes(fc.type, uint64_t(n_in)))};
        const std::vector<float> x = uniform(size_t(n_in), 42);
        const auto pw = prepare_weight(view, {.repack = true});
        set_decode_streams(1);
        std::vector<float> want(static_cast<size_t>(n_out));
        matmul(*pw, x.data(), 1, want.data(), pool1);
        for (int streams : {2, 4})
            for (int64_t distance : {int64_t(1), int64_t(4096), int64_t(1) << 20})
                for (bool stagger : {false, true}) {
                    set_decode_streams(streams, distance);
                    set_decode_stream_stagger(stagger);
                    for (thread_pool* pool : {&pool1, &pool2}) {
                        std::vector<float> got(want.size(), NAN);
                        matmul(*pw, x.data(), 1, got.data(), *pool);
                        for (size_t o = 0; o < want.size(); o++)
                            ASSERT_EQ(want[o], got[o])
                                << dtype_name(fc.type) << " via " << isa_name(path) << " n_out " << n_out << " streams "
                                << streams << " distance " << distance << " stagger " << stagger << " threads "
                                << pool->size() << " row " << o;
                    }
                }
        set_decode_streams(0);
        set_decode_stream_stagger(std::nullopt);
    }
}

// The staggered run lengths: TinyLlama's Q5_K gate / up at 4 streams (176 groups of 11,520 bytes per run start
// 2,027,520 bytes = 495 x 4 KiB apart) lose one group (175: starts 768 bytes apart modulo 4 KiB); runs already apart
// keep their length; where no length within a quarter of the run helps (4 KiB groups), the run is kept.
TEST(cpu_matmul_settings, staggered_runs_start_apart_modulo_4k) {
    using detail::staggered_run;
    EXPECT_EQ(staggered_run(176, 11520, 4), 175);
    EXPECT_EQ(staggered_run(175, 11520, 4), 175);
    EXPECT_EQ(staggered_run(64, 9472, 4), 63);  // Q4_K q: 64 x 9,472 = 148 x 4 KiB; 63: starts 2,816 / 1,536 / 256
    EXPECT_EQ(staggered_run(64, 9472, 2), 63);
    EXPECT_EQ(staggered_run(40, 4096, 4), 40);
    EXPECT_EQ(staggered_run(3, 4096, 2), 3);
    for (int64_t part : {int64_t(1), int64_t(2), int64_t(7), int64_t(100), int64_t(704)})
        for (size_t gb : {size_t(1152), size_t(9472), size_t(11520), size_t(13568), size_t(17408)})
            for (int count : {2, 4}) {
                const int64_t p = staggered_run(part, gb, count);
                EXPECT_LE(p, part);
                EXPECT_GE(p, part - part / 4);
                EXPECT_GT(p, 0);
            }
}

TEST(cpu_matmul_settings, decode_streams_rejects_other_counts) {
    for (int count : {-1, 3, 5, 8}) EXPECT_THROW(set_decode_streams(count), error) << count;
    set_decode_streams(0);
}

// Activations at any address: f32 activations that are not 32-byte aligned are copied to an aligned buffer
// first (matmul.cpp); the results must be those of an aligned call, bit for bit, decode and prefill.
TEST_P(cpu_matmul, unaligned_activations_give_the_same_results) {
    const auto& [path, fc] = GetParam();
    if (!isa_supported(path)) GTEST_SKIP() << isa_name(path) << " path skipped: " << isa_missing_reason(path);
    isa_guard guard(path);
    thread_pool pool(2);
    const int64_t n_in = fc.n_in.back(), n_out = 21;
    const std::vector<float> wf = uniform(size_t(n_in * n_out), 21);
    const std::vector<uint8_t> wq = encode(fc.type, wf, n_out, n_in);
    const weight_view view{fc.type, wq.data(), n_in, n_out, size_t(row_bytes(fc.type, uint64_t(n_in)))};
    const auto pw = prepare_weight(view);
    for (int64_t n_tok : {1, 7}) {
        const std::vector<float> x = uniform(size_t(n_in * n_tok), 22);
        std::vector<float> buf(x.size() + 64);
        float* aligned = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) / 64 * 64);
        std::vector<float> want(size_t(n_out * n_tok)), got(want.size());
        std::memcpy(aligned, x.data(), x.size() * sizeof(float));
        matmul(*pw, aligned, n_tok, want.data(), pool);
        for (int shift : {1, 4}) {
            std::memcpy(aligned + shift, x.data(), x.size() * sizeof(float));
            matmul(*pw, aligned + shift, n_tok, got.data(), pool);
            for (size_t k = 0; k < want.size(); k++)
                ASSERT_EQ(want[k], got[k]) << dtype_name(fc.type) << " n_tok " << n_tok << " shift " << shift;
        }
    }
}

std::string param_name(const testing::TestParamInfo<param>& info) {
    return std::string(isa_name(std::get<0>(info.param))) + "_" + std::string(dtype_name(std::get<1>(info.param).type));
}

// The AVX-512 kernels of the interleaved layouts do the AVX2 kernels' float operations on the same exact integer
// sums (avx512/matmul-avx512-repack.cpp), and the float layouts' prefill the same per-lane FMA chains on wider
// vectors (avx512/matmul-avx512-float-x32.cpp), so both AVX-512 paths (with and without GFNI bit unpacking) must
// give the AVX2 path's bits: decode (with one and four group streams) and prefill tiles (whole and partial tiles of
// both tile widths), ragged row counts, several super-blocks. Needs the avx2 path and an AVX-512 path on this CPU.
TEST(cpu_matmul_paths, avx512_interleaved_kernels_give_the_avx2_bits) {
    std::vector<isa> paths;
    for (isa i : {isa::avx512, isa::avx512_gfni})
        if (isa_supported(i)) paths.push_back(i);
    if (paths.empty() || !isa_supported(isa::avx2))
        GTEST_SKIP() << "needs the avx2 and an avx512 path: " << isa_missing_reason(isa::avx512);
    thread_pool pool(2);
    for (const format_case& fc : k_formats) {
        const int64_t n_in = fc.n_in.back();
        for (int64_t n_out : {int64_t(37), int64_t(256)}) {
            const std::vector<float> wf = uniform(size_t(n_in * n_out), 51);
            const std::vector<uint8_t> wq = encode(fc.type, wf, n_out, n_in);
            const weight_view view{fc.type, wq.data(), n_in, n_out, size_t(row_bytes(fc.type, uint64_t(n_in)))};
            const auto pw = prepare_weight(view, {.repack = true});
            for (int streams : {1, 2, 4}) {
                set_decode_streams(streams, 1);
                for (int64_t n_tok : {1, 3, 4, 9, 14, 31}) {
                    const std::vector<float> x = uniform(size_t(n_in * n_tok), 52);
                    std::vector<float> want(size_t(n_out * n_tok), NAN);
                    {
                        isa_guard guard(isa::avx2);
                        matmul(*pw, x.data(), n_tok, want.data(), pool);
                    }
                    for (isa path : paths)
                        for (int width : {256, 512}) {  // the decode's weight loads (set_decode_load_width)
                            std::vector<float> got(want.size(), NAN);
                            {
                                isa_guard guard(path);
                                set_decode_load_width(width);
                                matmul(*pw, x.data(), n_tok, got.data(), pool);
                                set_decode_load_width(0);
                            }
                            for (size_t k = 0; k < want.size(); k++)
                                ASSERT_EQ(want[k], got[k])
                                    << isa_name(path) << " " << dtype_name(fc.type) << " n_out " << n_out << " n_tok "
                                    << n_tok << " streams " << streams << " loads " << width << " element " << k;
                        }
                }
            }
            set_decode_streams(0);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(all_paths, cpu_matmul,
                         testing::Combine(testing::ValuesIn(all_isas()), testing::ValuesIn(k_formats)), param_name);

}  // namespace

TEST(cpu_isa, scalar_is_always_available_and_names_round_trip) {
    EXPECT_TRUE(isa_supported(isa::scalar));
    for (isa i : all_isas()) {
        if (!isa_supported(i)) continue;
        force_isa(isa_name(i));
        EXPECT_EQ(active_isa(), i);
    }
    force_isa("scalar");
    EXPECT_EQ(matmul_path(dtype::q4_k), "scalar");
    force_isa("auto");
    EXPECT_THROW(force_isa("sse9"), memtile::error);
}

TEST(cpu_matmul_paths, decode_load_width_takes_only_known_widths) {
    EXPECT_THROW(set_decode_load_width(128), memtile::error);
    for (dtype t : {dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q5_k, dtype::q6_k}) {
        set_decode_load_width(512);
        EXPECT_EQ(decode_load_width(t), 512);
        set_decode_load_width(256);
        EXPECT_EQ(decode_load_width(t), 256);
        set_decode_load_width(0);
        EXPECT_TRUE(decode_load_width(t) == 256 || decode_load_width(t) == 512);
    }
    EXPECT_EQ(decode_load_width(dtype::q5_k), 512);  // measured slower with 256-bit loads (matmul.h)
    EXPECT_EQ(decode_load_width(dtype::q8_0), 256);  // the 256-bit Q8_0 decode kernel (matmul.h)
}

TEST(cpu_isa, unsupported_path_cannot_be_forced) {
    for (isa i : all_isas())
        if (!isa_supported(i)) {
            EXPECT_THROW(force_isa(i), memtile::error) << isa_name(i);
        }
}

TEST(cpu_matmul_weight, rejects_row_length_not_a_block_multiple) {
    std::vector<uint8_t> data(1024);
    EXPECT_THROW(prepare_weight({dtype::q4_k, data.data(), 128, 2, 72}), memtile::error);
}

// The vectorized feed-forward activation (AVX2 exp) against the scalar loop, over both signs, large
// magnitudes (the exp underflow side) and a ragged tail.
TEST(cpu_ops, swiglu_matches_scalar) {
    std::vector<float> gate = uniform(1003, 11), up = uniform(1003, 12);
    for (size_t i = 0; i < gate.size(); i++) gate[i] *= i % 7 == 0 ? 120.0f : 8.0f;
    std::vector<float> want = gate, got = gate;
    {
        isa_guard guard(isa::scalar);
        swiglu(want.data(), up.data(), int64_t(want.size()));
    }
    swiglu(got.data(), up.data(), int64_t(got.size()));
    for (size_t i = 0; i < got.size(); i++)
        EXPECT_NEAR(got[i], want[i], 1e-6f * std::max(1.0f, std::fabs(want[i])))
            << "element " << i << " gate " << gate[i];
}

// rms_norm (partial sums in double) against one long-double sum on ragged lengths, rows with values of very different
// magnitude included: within one float rounding of the reference, whatever the summation order.
TEST(cpu_ops, rms_norm_matches_a_sequential_sum) {
    for (int64_t n : {1, 7, 8, 9, 63, 64, 65, 1003, 2048}) {
        std::vector<float> x = uniform(size_t(n), 21), w = uniform(size_t(n), 22), got(x.size());
        for (int64_t i = 0; i < n; i++) x[size_t(i)] *= i % 5 == 0 ? 3.0e3f : 1.0e-2f;
        rms_norm(x.data(), w.data(), got.data(), n, 1e-5f);
        long double ss = 0;
        for (float v : x) ss += static_cast<long double>(v) * v;
        const float scale = float(1.0L / std::sqrt(ss / n + 1e-5L));
        for (int64_t i = 0; i < n; i++) {
            const float want = x[size_t(i)] * scale * w[size_t(i)];
            EXPECT_NEAR(got[size_t(i)], want, 2.5e-7f * std::fabs(want)) << "n " << n << " element " << i;
        }
    }
}

// matmul_multi gives each product exactly what matmul gives it alone: shared activations (Q4_K with Q6_K),
// different activation formats (with Q8_0 and F16), repacked and original layouts mixed, ragged row counts.
TEST(cpu_matmul_multi, equals_separate_calls) {
    thread_pool pool(2);
    const int64_t n_in = 512;
    const dtype types[] = {dtype::q4_k, dtype::q6_k, dtype::q8_0, dtype::f16};
    const int64_t n_outs[] = {37, 7, 20, 9};
    for (const std::vector<int>& pick : {std::vector<int>{0, 1}, std::vector<int>{0, 1, 2}, std::vector<int>{3, 0}}) {
        for (bool repack : {false, true}) {
            std::vector<std::vector<uint8_t>> data;
            std::vector<std::unique_ptr<prepared_weight>> pws;
            for (size_t i = 0; i < pick.size(); i++) {
                const dtype t = types[pick[i]];
                const int64_t n_out = n_outs[pick[i]];
                data.push_back(encode(t, uniform(size_t(n_in * n_out), uint32_t(40 + i)), n_out, n_in));
                pws.push_back(prepare_weight({t, data.back().data(), n_in, n_out, size_t(row_bytes(t, uint64_t(n_in)))},
                                             {.repack = repack && i % 2 == 0}));
            }
            for (int64_t n_tok : {1, 5}) {
                const std::vector<float> x = uniform(size_t(n_in * n_tok), 99);
                std::vector<std::vector<float>> multi(pick.size()), single(pick.size());
                std::vector<const prepared_weight*> ws;
                std::vector<float*> ys;
                for (size_t i = 0; i < pick.size(); i++) {
                    multi[i].assign(size_t(n_outs[pick[i]] * n_tok), NAN);
                    single[i].assign(multi[i].size(), NAN);
                    ws.push_back(pws[i].get());
                    ys.push_back(multi[i].data());
                    matmul(*pws[i], x.data(), n_tok, single[i].data(), pool);
                }
                matmul_multi(ws, x.data(), n_tok, ys, pool);
                for (size_t i = 0; i < pick.size(); i++)
                    for (size_t k = 0; k < multi[i].size(); k++)
                        ASSERT_EQ(multi[i][k], single[i][k]) << dtype_name(types[pick[i]]) << " n_tok " << n_tok
                                                             << " repack " << repack << " element " << k;
            }
        }
    }
}
