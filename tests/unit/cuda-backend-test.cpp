// CUDA backend vs the CPU engine on tiny synthetic models, one per weight format. Without a CUDA device
// (CI) every test reports itself skipped; the device-machine driver tests/cuda/cuda-check.cpp runs the same
// checks (tests/support/cuda-checks.h) with the larger models and the benchmarks.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>

#include "backends/cuda/attention-group.h"
#include "backends/cuda/cuda-backend.h"
#include "backends/cuda/wave-splits.h"
#include "core/error.h"
#include "models/presets.h"
#include "support/cuda-checks.h"

namespace memtile {
namespace {

bool have_device() {
    return cuda::compiled() && cuda::device_count() > 0;
}

#define MEMTILE_SKIP_WITHOUT_CUDA() \
    if (!have_device()) GTEST_SKIP() << "no CUDA device (" << cuda::device_description() << ")"

// The decode attention's keys per split (pure arithmetic: runs without a device): every key in exactly one split of
// the grid, the used splits the first ones; min_keys 0 is the cut before session 38; with min_keys K every used split
// but the last holds K or more keys, and ceil(n_keys / K) splits are used where that is fewer than the grid's.
TEST(cuda_backend, attention_split_keys_cover_every_key_once) {
    for (int k : {0, 1, 4, 64, 128})
        for (int n_split = 1; n_split <= 32; n_split++)
            for (int n_keys = 1; n_keys <= 700; n_keys += n_keys < 140 ? 1 : 37) {
                const int c = cuda::attn_split_chunk(n_keys, n_split, k);
                ASSERT_GT(c, 0);
                int covered = 0, used = 0, last_used = -1;
                for (int s = 0; s < n_split; s++) {
                    const int j0 = s * c, j1 = std::min(n_keys, j0 + c);
                    if (j1 <= j0) continue;
                    ASSERT_EQ(j0, covered) << "gap or overlap at split " << s;
                    covered = j1;
                    used++;
                    last_used = s;
                    if (j1 < n_keys) {
                        EXPECT_GE(j1 - j0, k) << n_keys << " keys, " << n_split << " splits, K " << k;
                    }
                }
                ASSERT_EQ(covered, n_keys) << n_keys << " keys, " << n_split << " splits, K " << k;
                EXPECT_EQ(used, (n_keys + c - 1) / c);
                EXPECT_EQ(last_used, used - 1);  // the used splits are the first ones
                // Where K keys per split would need fewer splits than the grid has, ceil(n_keys / K) of them; else the
                // cut of K = 0.
                const int even = (n_keys + n_split - 1) / n_split;
                if (k >= even) {
                    EXPECT_EQ(used, (n_keys + k - 1) / k) << n_keys << " keys, " << n_split << " splits, K " << k;
                } else {
                    EXPECT_EQ(c, even);
                }
            }
}

// The one-head attention's split count against the device's waves of blocks (pure arithmetic: runs without a device).
TEST(cuda_backend, attention_splits_fill_whole_waves) {
    // 32 heads, 528 blocks a wave (H100, 4 per SM): 17..31 splits need two waves for less than twice 16's keys each.
    for (int s = 17; s <= 31; s++) EXPECT_EQ(cuda::fewest_wave_splits(32, s, 528), 16) << s << " splits";
    EXPECT_EQ(cuda::fewest_wave_splits(32, 32, 528), 32);  // 1,024 blocks: two full waves, as cheap as 16 in one
    EXPECT_EQ(cuda::fewest_wave_splits(32, 16, 528), 16);  // one wave already
    EXPECT_EQ(cuda::fewest_wave_splits(32, 25, 0), 25);    // wave unknown: unchanged
    EXPECT_EQ(cuda::fewest_wave_splits(32, 1, 8), 1);
    // 40 heads at 264 a wave: 6 splits (240 blocks) in one wave, 13 (520) in two, 19 (760) in three (3 / 19 > 2 / 13),
    // 26 (1,040) in four (4 / 26 = 2 / 13: the larger kept).
    EXPECT_EQ(cuda::fewest_wave_splits(40, 7, 264), 6);
    EXPECT_EQ(cuda::fewest_wave_splits(40, 13, 264), 13);
    EXPECT_EQ(cuda::fewest_wave_splits(40, 18, 264), 13);
    EXPECT_EQ(cuda::fewest_wave_splits(40, 19, 264), 13);
    EXPECT_EQ(cuda::fewest_wave_splits(40, 26, 264), 26);
    // Every choice is at most the count asked for and never costs more waves per key than it.
    for (int heads : {8, 12, 32, 40, 64})
        for (int s = 1; s <= 32; s++)
            for (int64_t wave : {132, 264, 528, 1056}) {
                const int b = cuda::fewest_wave_splits(heads, s, wave);
                ASSERT_GE(b, 1);
                ASSERT_LE(b, s);
                const auto waves = [&](int x) { return (int64_t(heads) * x + wave - 1) / wave; };
                EXPECT_LE(waves(b) * s, waves(s) * b) << heads << " heads, " << s << " splits, wave " << wave;
            }
}

// The decode attention's heads per block (pure arithmetic: runs without a device). llama3-8b shapes on 132 SMs.
TEST(cuda_backend, attention_heads_per_block) {
    auto heads = [](int n_head, int n_head_kv, int hd, int n_split, int n_rows, bool mma, int setting = 0,
                    bool aligned = true) {
        return cuda::attn_group_heads({n_head, n_head_kv, hd, n_split, n_rows, setting, aligned, mma, 132});
    };
    // Forms 0 and 1: GQA blocks from 8 splits and a block per SM, the batch's rows counting.
    EXPECT_EQ(heads(32, 8, 128, 4, 1, false), 1);   // context 512
    EXPECT_EQ(heads(32, 8, 128, 13, 1, false), 1);  // 104 blocks
    EXPECT_EQ(heads(32, 8, 128, 13, 8, false), 4);  // 832 blocks in a batch of 8
    EXPECT_EQ(heads(32, 8, 128, 17, 1, false), 4);  // 136 blocks
    EXPECT_EQ(heads(32, 8, 128, 4, 16, false), 1);  // fewer than 8 splits
    // Tensor cores: from 8 splits whatever the grid, and a sequence takes the same blocks alone and in any batch.
    EXPECT_EQ(heads(32, 8, 128, 13, 1, true), 4);
    EXPECT_EQ(heads(32, 8, 128, 8, 1, true), 4);
    EXPECT_EQ(heads(32, 8, 128, 7, 1, true), 1);
    for (int s = 1; s <= 32; s++)
        for (int rows = 2; rows <= 16; rows++)
            EXPECT_EQ(heads(32, 8, 64, s, rows, true), heads(32, 8, 64, s, 1, true)) << s << " splits, " << rows;
    // One head per block: MHA, head sizes that are not 16-byte rows or above 256, unaligned caches, the setting 1.
    EXPECT_EQ(heads(32, 32, 128, 32, 1, true), 1);
    EXPECT_EQ(heads(32, 8, 100, 32, 1, false), 1);
    EXPECT_EQ(heads(32, 8, 288, 32, 1, false), 1);
    EXPECT_EQ(heads(32, 8, 128, 32, 1, true, 0, false), 1);
    EXPECT_EQ(heads(32, 8, 128, 32, 1, true, 1), 1);
    // A forced count is capped by the kernels (4 heads; 2 at head_dim 256) and cut evenly: 7 query heads per KV head
    // as 4 + 3, 3 as 2 + 1 under a cap of 2.
    EXPECT_EQ(heads(32, 8, 128, 2, 1, false, 8), 4);
    EXPECT_EQ(heads(16, 8, 256, 32, 1, false, 8), 2);
    EXPECT_EQ(heads(28, 4, 128, 32, 1, true), 4);
    EXPECT_EQ(heads(6, 2, 64, 1, 1, false, 2), 2);
}

TEST(cuda_backend, require_device_names_the_reason) {
    if (have_device()) GTEST_SKIP() << "a CUDA device is present";
    try {
        cuda::require_device();
        FAIL() << "require_device() did not throw";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("[cuda]"), std::string::npos) << e.what();
    }
}

// A head_dim the decode attention cannot take (8..256) is refused when the decoder is made, before any device work.
TEST(cuda_backend, unsupported_head_dim_is_refused_at_load) {
    if (!cuda::compiled()) GTEST_SKIP() << "CUDA backend not compiled in";
    for (uint32_t hd : {4u, 320u}) {
        model_config c = find_preset("llama3-8b").config;
        c.head_dim = c.n_rot = hd;
        try {
            (void)cuda::decoder::random(c, file_type::f16, 64, 1);
            FAIL() << "head_dim " << hd << " was accepted";
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find("head_dim " + std::to_string(hd)), std::string::npos) << e.what();
        }
    }
}

bool libcublas_mapped() {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line))
        if (line.find("libcublas") != std::string::npos) return true;
    return false;
}

// cuBLAS is loaded on first use, not linked: a process that has not run a GPU prefill does not map it (linked, it
// made ~145 MB resident in CPU runs). Needs the toolkit's libcublas, no device.
TEST(cuda_backend, cublas_is_loaded_on_first_use) {
    if (!cuda::compiled()) GTEST_SKIP() << "CUDA backend not compiled in";
    if (!have_device()) {
        EXPECT_FALSE(libcublas_mapped()) << "libcublas mapped before any GPU work";
    }
    ASSERT_NO_THROW(cuda::load_blas());
    EXPECT_TRUE(libcublas_mapped());
}

// Each matvec kernel against the CPU engine's matmul on the same GGUF rows: both quantize the activations
// the same way and take the same integer dot products, so only float summation order may differ.
TEST(cuda_backend, matvec_matches_the_cpu_matmul_per_format) {
    MEMTILE_SKIP_WITHOUT_CUDA();
    const dtype types[] = {dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::f16, dtype::bf16};
    for (dtype t : types) {
        for (const auto& [n_in, n_out] : {std::pair<int64_t, int64_t>{256, 512}, {768, 77}, {4096, 130}}) {
            EXPECT_LE(test::compare_matvec(t, n_in, n_out, uint64_t(n_in + n_out)), 1e-9)
                << dtype_name(t) << " " << n_out << "x" << n_in;
        }
        EXPECT_LE(test::compare_embedding(t, 768, 40, 5), 1e-6) << dtype_name(t);
    }
}

// The decode steps' greedy pick over sliced rows against a host scan (ties, NaN, -inf, row lengths around the slicing).
TEST(cuda_backend, argmax_matches_a_host_scan) {
    MEMTILE_SKIP_WITHOUT_CUDA();
    EXPECT_EQ(test::argmax_mismatches(21), 0);
}

// The Q4_K_M products of matvec-qkm.h (Q/K + V in one launch, the alternative Q4_K kernels): against the CPU matmul and
// bit-equal to the plain launches.
TEST(cuda_backend, qkm_products_match_the_plain_launches) {
    MEMTILE_SKIP_WITHOUT_CUDA();
    using namespace cuda;
    for (unsigned bits : {k_qkm_pair, k_qkm_pair | k_qkm_pair_v_last, k_qkm_pair | k_qkm_pair_v2,
                          k_qkm_pair | k_qkm_pair_v_last | k_qkm_pair_v2, k_qkm_pair | k_qkm_pair_nocap,
                          k_qkm_pair | k_qkm_pair_v2 | k_qkm_pair_qk4}) {
        const auto r = test::compare_qkm_products(1024, 130, 66, bits, bits);
        EXPECT_LE(r.nmse, 1e-9) << "bits " << bits;
        EXPECT_TRUE(r.bit_equal) << "bits " << bits;
    }
    struct item {
        int64_t n_in, n_out_a, n_out_b;
        unsigned bits;
    };
    for (const item& it :
         {item{512, 8194, 0, k_qkm_gate_up_4x2}, item{512, 8194, 0, k_qkm_gate_up_3x2},
          item{1024, 20001, 0, k_qkm_gate_up_loop}, item{4096, 77, 0, k_qkm_small_4x2},
          item{8192, 77, 0, k_qkm_down_u4}, item{8192, 77, 0, k_qkm_down_4x2}, item{1024, 77, 0, k_qkm_all_1x2},
          item{8192, 77, 33, k_qkm_q6_down_64}, item{8192, 77, 33, k_qkm_q6_down_3},
          item{4096, 131, 1025, k_qkm_lean_q4k | k_qkm_lean_q6k}, item{14336, 77, 35, k_qkm_lean_q4k | k_qkm_lean_q6k},
          item{6144, 33, 33, k_qkm_lean_q4k | k_qkm_lean_q6k},
          item{2816, 77, 33, k_qkm_pair | k_qkm_pair_v2 | k_qkm_lean_pair}}) {
        const auto r = test::compare_qkm_products(it.n_in, it.n_out_a, it.n_out_b, it.bits, it.bits);
        EXPECT_LE(r.nmse, 1e-9) << "bits " << it.bits;
        EXPECT_TRUE(r.bit_equal) << "bits " << it.bits;
    }
}

// The Q6_K lean products at other register budgets (set_q6k_variant; the default: the down product at 64 registers):
// bit-equal to the plain launches.
TEST(cuda_backend, q6k_variants_match_the_plain_launches) {
    MEMTILE_SKIP_WITHOUT_CUDA();
    struct item {
        int64_t n_in, n_out_b;
        int mode, param;
    };
    for (const item& it :
         {item{14336, 131, 0, 0}, item{12288, 35, 0, 0}, item{14336, 77, 2, 33}, item{14336, 67, 2, 48},
          item{4096, 1025, 4, 42}, item{4096, 67, 4, 48}, item{256, 9, 4, 16}}) {
        cuda::set_q6k_variant(it.mode, it.param);
        const auto r = test::compare_qkm_products(it.n_in, 5, it.n_out_b, cuda::k_qkm_lean_q6k, uint64_t(it.n_in));
        cuda::set_q6k_variant(0);
        EXPECT_LE(r.nmse, 1e-9) << "mode " << it.mode << " param " << it.param << " n_in " << it.n_in;
        EXPECT_TRUE(r.bit_equal) << "mode " << it.mode << " param " << it.param << " n_in " << it.n_in;
    }
}

// The Q4_K lane-pair products (cuda::set_q4k_matvec) against the CPU engine's matmul and bit-equal to the plain kernel:
// one task per thread (4,096), the loop (14,336), partial warps (2,816: 44 tasks; 256), odd row counts; also with the
// first weights loaded before the PDL wait after a sleep (the default, 578).
TEST(cuda_backend, q4k_lane_pairs_match_the_plain_kernel) {
    MEMTILE_SKIP_WITHOUT_CUDA();
    for (int mode : {2, 2 | 8, 2 | 64 | (2 << 8)})
        for (const auto& sh : {std::pair<int64_t, int64_t>{4096, 77}, {14336, 33}, {2816, 19}, {256, 5}}) {
            const auto r = test::compare_q4k_mode(sh.first, sh.second, mode, uint64_t(sh.first + mode));
            EXPECT_LE(r.nmse, 1e-9) << "mode " << mode << " n_in " << sh.first;
            EXPECT_TRUE(r.bit_equal) << "mode " << mode << " n_in " << sh.first;
        }
}

// RoPE + f16 KV cache + split attention against the CPU engine's ops.
TEST(cuda_backend, attention_matches_the_cpu_ops) {
    MEMTILE_SKIP_WITHOUT_CUDA();
    EXPECT_LE(test::compare_attention(2, 4, 2, 64, 4, false, 1, 1), 1e-10);
    EXPECT_LE(test::compare_attention(9, 6, 2, 64, 4, true, 3, 2), 1e-10);
    EXPECT_LE(test::compare_attention(40, 32, 8, 128, 2, false, 4, 3), 1e-10);
}

// RoPE and the KV write folded into the attention kernel (launch_attention_rope: separate merge, early K/V loads,
// merge in the kernel): the same bits as the separate RoPE kernel + attention, and the CPU ops' result. Blocks of
// several query heads of one KV head (GQA groups of 2-8, cut evenly or not, over tiles of keys) give the bits of one
// head per block.
TEST(cuda_backend, attention_with_folded_rope_equals_the_separate_kernels) {
    MEMTILE_SKIP_WITHOUT_CUDA();
    for (const auto& [n_pos, n_head, n_kv, hd, neox, n_split] : {std::tuple{2, 4, 2, 64, false, 1},
                                                                 {9, 6, 2, 64, true, 3},
                                                                 {40, 32, 8, 128, false, 4},
                                                                 {130, 8, 1, 256, true, 4},
                                                                 {33, 4, 4, 32, false, 2},
                                                                 {37, 28, 4, 128, false, 3},
                                                                 {600, 32, 8, 128, false, 32},
                                                                 {128, 32, 8, 128, false, 4},
                                                                 {200, 16, 4, 64, true, 2},
                                                                 {96, 8, 2, 32, false, 1}}) {
        const auto r = test::compare_attention_variants(n_pos, n_head, n_kv, hd, 4, neox, n_split, uint64_t(n_pos));
        EXPECT_EQ(r.differ_from_0, 0) << n_pos << " positions, head_dim " << hd;
        EXPECT_EQ(r.differ_grouped, 0) << n_pos << " positions, head_dim " << hd;
        for (double e : r.nmse) EXPECT_LE(e, 1e-10) << n_pos << " positions, head_dim " << hd;
    }
}

// The attention merge in a thread-block cluster (launch_attention_rope with cluster: partial states exchanged through
// distributed shared memory, no last block): the same bits as the separate kernels, unquantized and with the output
// quantized for a Wo reading groups of 32 or units of 256 (the latter: 2 or 4 heads per cluster).
TEST(cuda_backend, attention_cluster_merge_equals_the_separate_kernels) {
    MEMTILE_SKIP_WITHOUT_CUDA();
    for (const auto& [n_pos, n_head, n_kv, hd, neox, n_split] : {std::tuple{2, 4, 2, 64, false, 1},
                                                                 {9, 4, 1, 64, true, 2},
                                                                 {40, 32, 8, 128, false, 4},
                                                                 {130, 8, 1, 256, true, 8}})
        for (int qb : {0, 32, 256}) {
            const auto r =
                test::compare_attention_variants(n_pos, n_head, n_kv, hd, 4, neox, n_split, uint64_t(n_pos), qb);
            EXPECT_EQ(r.differ_from_0, 0) << n_pos << " positions, head_dim " << hd << ", q_block " << qb;
            EXPECT_EQ(r.differ_grouped, 0) << n_pos << " positions, head_dim " << hd << ", q_block " << qb;
            EXPECT_LE(r.nmse[4], 1e-10) << n_pos << " positions, head_dim " << hd;
            EXPECT_LE(r.nmse[5], 1e-10) << n_pos << " positions, head_dim " << hd;
        }
}

struct format_case {
    const char* preset;
    file_type type;
    double tolerance;
};

TEST(cuda_backend, logits_match_the_cpu_engine_per_format) {
    MEMTILE_SKIP_WITHOUT_CUDA();
    const auto dir = std::filesystem::temp_directory_path() / "memtile-cuda-test";
    std::filesystem::create_directories(dir);
    const format_case cases[] = {
        {"tiny", file_type::f16, 1e-5},           {"tiny", file_type::bf16, 1e-5},
        {"tiny", file_type::q8_0, 1e-3},          {"tiny", file_type::q4_0, 1e-3},
        {"tiny", file_type::q4_k_m, 1e-3},        {"tiny", file_type::q5_k_m, 1e-3},
        {"tiny-qwen2", file_type::q8_0, 1e-3},    {"tiny-phi3", file_type::f16, 1e-5},
        {"tiny-llama3", file_type::q4_k_m, 1e-3},
    };
    for (const auto& c : cases) {
        const std::string path = test::make_synthetic(dir.string(), c.preset, c.type);
        const auto r = test::compare_logits(path, 12);
        EXPECT_LE(r.worst_nmse, c.tolerance) << c.preset << " " << file_type_name(c.type);
    }
}

}  // namespace
}  // namespace memtile
