// The load-time packers of repack.h against their scalar reference: the same bytes for every format, on
// ragged shapes (row lengths of one block up to several super-blocks, odd Q8_0/Q4_0 block counts, groups with
// missing rows), every byte of the group written; a repacked weight built over a thread pool against the one
// built by the calling thread alone; and which memory modes --repack auto repacks in.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/matmul.h"
#include "backends/cpu/repack.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"
#include "models/synthetic-model.h"
#include "models/transformer.h"
#include "support/test-paths.h"

using namespace memtile;
using namespace memtile::cpu;

namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (uint8_t& b : v) b = uint8_t(rng());
    return v;
}

struct shape_case {
    dtype type;
    std::vector<int64_t> n_in;
};

// Random file bytes are valid input: the packers only move bits (f16 scales are copied, never converted).
const shape_case k_cases[] = {
    {dtype::q4_k, {256, 512, 2304}},
    {dtype::q5_k, {256, 512, 2304}},
    {dtype::q6_k, {256, 512, 2304}},
    {dtype::q8_0, {32, 64, 96, 544, 1120}},
    {dtype::q4_0, {32, 64, 96, 544, 1120}},
    // The float layouts (32-row groups): row lengths across the packer's 64-column tiles.
    {dtype::f32, {1, 13, 64, 200}},
    {dtype::f16, {1, 13, 64, 200}},
    {dtype::bf16, {1, 13, 64, 200}},
};

}  // namespace

TEST(repack, fast_packer_matches_reference) {
    uint32_t seed = 1;
    for (const auto& c : k_cases) {
        for (int64_t n_in : c.n_in) {
            const size_t rb = size_t(row_bytes(c.type, uint64_t(n_in)));
            const size_t gb = repack::group_bytes(c.type, n_in);
            const int gr = repack::group_rows(c.type);
            const auto file = random_bytes(rb * size_t(gr), seed++);
            // Present-row masks: all rows, a last group of 1, 3 and 7 (Q4_K: 15, float: 31) rows, and holes (not
            // produced by the loader, but pack_group accepts them).
            const uint32_t all = gr == 32 ? 0xFFFFFFFFu : (1u << gr) - 1;
            for (uint32_t mask : {all, 0x01u, 0x07u, all >> 1, 0xA5A5A5A5u & all, 0x00u}) {
                const uint8_t* rows[repack::k_max_rows];
                for (int r = 0; r < gr; r++) rows[r] = (mask >> r) & 1 ? file.data() + rb * size_t(r) : nullptr;
                // Different garbage in the two outputs: a byte the fast packer leaves unwritten shows up.
                std::vector<uint8_t> want(gb, 0x5A), got(gb, 0xC3);
                repack::pack_group_ref(c.type, rows, n_in, want.data());
                repack::pack_group(c.type, rows, n_in, got.data());
                ASSERT_EQ(0, std::memcmp(want.data(), got.data(), gb))
                    << dtype_name(c.type) << " n_in " << n_in << " mask " << mask;
            }
        }
    }
}

TEST(repack, pool_builds_the_same_layout) {
    thread_pool pool(2);
    uint32_t seed = 100;
    for (const auto& c : k_cases) {
        // 37 rows: 5 groups, the last one of 5 rows (float layouts: 2, the last of 5); 203: enough groups for
        // both threads to take some.
        for (int64_t n_out : {int64_t(1), int64_t(37), int64_t(203)}) {
            const int64_t n_in = c.n_in.back();
            weight_view w;
            w.type = c.type;
            w.n_in = n_in;
            w.n_out = n_out;
            w.row_bytes = size_t(row_bytes(c.type, uint64_t(n_in)));
            const auto file = random_bytes(w.row_bytes * size_t(n_out), seed++);
            w.data = file.data();
            prepare_options one;
            one.repack = true;
            prepare_options many = one;
            many.pool = &pool;
            const auto a = prepare_weight(w, one), b = prepare_weight(w, many);
            const auto sa = a->streamed(), sb = b->streamed();
            ASSERT_EQ(sa.size(), sb.size());
            if (sa.data() == w.data) continue;  // no x8 kernel on this CPU: nothing was repacked
            const int64_t gr = repack::group_rows(c.type), n_groups = (n_out + gr - 1) / gr;
            ASSERT_EQ(sa.size(), repack::group_bytes(c.type, n_in) * size_t(n_groups));
            EXPECT_EQ(0, std::memcmp(sa.data(), sb.data(), sa.size())) << dtype_name(c.type) << " n_out " << n_out;
            // And the bytes are the reference packer's.
            std::vector<uint8_t> want(sa.size());
            for (int64_t g = 0; g < n_groups; g++) {
                const uint8_t* rows[repack::k_max_rows];
                for (int r = 0; r < gr; r++) {
                    const int64_t o = g * gr + r;
                    rows[r] = o < n_out ? w.data + size_t(o) * w.row_bytes : nullptr;
                }
                repack::pack_group_ref(c.type, rows, n_in, want.data() + size_t(g) * repack::group_bytes(c.type, n_in));
            }
            EXPECT_EQ(0, std::memcmp(want.data(), sb.data(), sa.size())) << dtype_name(c.type) << " n_out " << n_out;
        }
    }
}

TEST(repack, auto_mode_follows_the_memory_mode) {
    {
        // The x8 layouts need the AVX2 kernels: probe with one small Q8_0 matrix.
        const std::vector<uint8_t> bytes(size_t(row_bytes(dtype::q8_0, 32)) * 8, 0);
        const weight_view w{dtype::q8_0, bytes.data(), 32, 8, size_t(row_bytes(dtype::q8_0, 32))};
        if (prepare_weight(w, {.repack = true})->streamed().data() == bytes.data()) GTEST_SKIP() << "no x8 kernels";
    }
    const std::string path = test::shared_path("quant/tiny-llama-Q8_0.gguf");
    // Whether any matrix the decode streams lies outside the file's bytes (a packed copy).
    const auto repacked = [&path](const model_options& mo) {
        thread_pool pool(2);
        const auto m = transformer::load(path, mo, &pool);
        const auto file = m->file().file().bytes();
        for (const auto& s : m->streamed_weights())
            if (s.data() < file.data() || s.data() >= file.data() + file.size()) return true;
        return false;
    };
    model_options mo;
    mo.repack = repack_mode::automatic;
    EXPECT_TRUE(repacked(mo)) << "mmap";
    mo.load.use_mmap = false;
    EXPECT_FALSE(repacked(mo)) << "--no-mmap";
    mo.load.use_mmap = true;
    mo.load.mlock = true;
    EXPECT_FALSE(repacked(mo)) << "--mlock";
    mo.load.mlock = false;
    mo.repack = repack_mode::on;
    EXPECT_TRUE(repacked(mo)) << "on";
    mo.repack = repack_mode::off;
    EXPECT_FALSE(repacked(mo)) << "off";
    EXPECT_EQ(parse_repack_mode("auto"), repack_mode::automatic);
    EXPECT_STREQ(repack_mode_name(parse_repack_mode("on")), "on");
    EXPECT_THROW(parse_repack_mode("yes"), error);
}

TEST(repack, only_the_cpu_layers_are_packed_with_gpu_layers) {
    {
        const std::vector<uint8_t> bytes(size_t(row_bytes(dtype::q8_0, 32)) * 8, 0);
        const weight_view w{dtype::q8_0, bytes.data(), 32, 8, size_t(row_bytes(dtype::q8_0, 32))};
        if (prepare_weight(w, {.repack = true})->streamed().data() == bytes.data()) GTEST_SKIP() << "no x8 kernels";
    }
    // --gpu-layers: the CPU engine computes layers [0, cpu_layers); the GPU's layers and the output stay unpacked.
    const std::string path = test::shared_path("quant/tiny-llama-Q8_0.gguf");
    const auto packed = [&path](uint32_t cpu_layers) {
        model_options mo;
        mo.repack = repack_mode::on;
        mo.cpu_layers = cpu_layers;
        thread_pool pool(2);
        const auto m = transformer::load(path, mo, &pool);
        const auto file = m->file().file().bytes();
        int n = 0;
        for (const auto& s : m->streamed_weights())
            n += s.data() < file.data() || s.data() >= file.data() + file.size();
        return std::pair{n, m->config().n_layer};
    };
    const auto [all, n_layer] = packed(UINT32_MAX);
    ASSERT_GE(n_layer, 2u);
    const int one = packed(1).first;
    EXPECT_GT(one, 0);
    EXPECT_LT(one, all);
    EXPECT_EQ(packed(0).first, 0);
    EXPECT_EQ(packed(n_layer).first, all);
}

TEST(repack, released_tied_embedding_rows_read_back_the_same) {
    // Tied embeddings (tiny-llama3) at Q8_0 with repack on: mapped, the gather returns the table's pages after
    // each step (release_rows); read into memory (--no-mmap), nothing is released. Same logits bit for bit,
    // with tokens repeated so that released rows are read again.
    synthetic_options so;
    so.preset = "tiny-llama3";
    so.type = file_type::q8_0;
    so.progress = false;
    const auto path = test::scratch("repack-tied-q8_0.gguf");
    write_synthetic_model(so, path);
    thread_pool pool(2);
    model_options mapped;
    mapped.repack = repack_mode::on;
    model_options read = mapped;
    read.load.use_mmap = false;
    const auto a = transformer::load(path, mapped, &pool), b = transformer::load(path, read, &pool);
    ASSERT_TRUE(a->config().tied_embeddings);
    const auto file = a->file().file().bytes();
    const auto output = a->streamed_weights().back();  // the output matrix: the packed copy of token_embd
    if (output.data() >= file.data() && output.data() < file.data() + file.size()) GTEST_SKIP() << "no x8 kernels";
    forward_context ca(*a, 64, dtype::f32, pool), cb(*b, 64, dtype::f32, pool);
    const std::vector<int32_t> prompt = {5, 17, 5, 300, 17};
    const auto la = ca.forward(prompt);
    const std::vector<float> first(la.begin(), la.end());
    const auto lb = cb.forward(prompt);
    ASSERT_EQ(first.size(), lb.size());
    EXPECT_EQ(0, std::memcmp(first.data(), lb.data(), first.size() * sizeof(float)));
    for (int32_t t : {5, 300, 5, 17, 2}) {
        const auto xa = ca.forward(std::span<const int32_t>(&t, 1));
        const std::vector<float> va(xa.begin(), xa.end());
        const auto xb = cb.forward(std::span<const int32_t>(&t, 1));
        EXPECT_EQ(0, std::memcmp(va.data(), xb.data(), va.size() * sizeof(float))) << "token " << t;
    }
}
