// Device-machine driver of the CUDA backend: correctness against the CPU engine (logits per weight format,
// greedy tokens of stories260K and the default model) and batch-1 decode benchmarks of llama3-8b shapes
// against the HBM read bandwidth probed in the same run. Built by MEMTILE_DEVICE_BUILD=ON (no GoogleTest,
// CLI or server needed). Usage: memtile-cuda-check [--stories FILE.bin] [--kjv FILE.gguf] [--tmp DIR]
//                               [--no-bench] [--bench-only] [--no-decode-bench] [--only FILE_TYPE]
#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "backends/cuda/cuda-backend.h"
#include "core/error.h"
#include "gguf/gguf-file.h"
#include "models/llama2c-import.h"
#include "models/presets.h"
#include "support/cuda-checks.h"

using namespace memtile;

namespace {

int failures = 0;

void report(bool ok, const std::string& what) {
    fmt::print("{} {}\n", ok ? "PASS" : "FAIL", what);
    std::fflush(stdout);
    if (!ok) failures++;
}

// Prefill (two passes, then decode steps on the KV they wrote) against the CPU engine, batched decode against
// the single-sequence decoder; with `reference` the scalar attention kernel instead of the tensor-core one.
void check_prefill_batch(const std::string& name, const std::string& path, double tol, bool batch, int n_first = 70,
                         int n_second = 60) {
    try {
        const auto r = test::compare_prefill(path, n_first, n_second, 8);
        report(r.prefill_nmse <= tol && r.decode_nmse <= tol,
               fmt::format("prefill {:<22} {}+{} tokens NMSE {:.3e}, decode after it {:.3e} (tol {:.0e})", name,
                           n_first, n_second, r.prefill_nmse, r.decode_nmse, tol));
        if (!batch) return;
        {
            auto d = cuda::decoder::load(gguf_file::open(path), 64);
            const auto [e, where] = d->make_batch(4, 64)->check_products(4);
            report(e <= 1e-5, fmt::format("products {:<22} model weights, tensor cores vs dp4a/FMA: worst NMSE {:.3e} "
                                          "({})",
                                          name, e, where));
        }
        // Tolerance as against the CPU engine: the products agree to ~1e-14 (line above), but a last-bit change
        // can flip the rounding of an int8 activation in the next layer, which quantized formats amplify.
        const auto b = test::compare_batch(path, 4, 6);
        report(b.worst_nmse <= tol && b.token_mismatches == 0,
               fmt::format("batch   {:<22} 4 sequences x {} steps vs single: NMSE {:.3e}, {} argmax mismatches", name,
                           b.steps, b.worst_nmse, b.token_mismatches));
    } catch (const std::exception& e) {
        report(false, fmt::format("prefill/batch {}: {}", name, e.what()));
    }
}

// Batched tensor-core products vs the dp4a/FMA kernels, per weight type, over shapes and batch sizes.
void check_batch_products() {
    const dtype types[] = {dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::f16, dtype::bf16};
    const int64_t shapes[][2] = {{256, 64}, {256, 512}, {768, 256}, {4096, 1040}};
    for (dtype t : types) {
        double worst = 0;
        std::string where;
        try {
            for (const auto& sh : shapes)
                for (int nb : {2, 5, 8, 9, 16}) {
                    const double e = cuda::check_batch_products(t, sh[0], sh[1], nb, uint64_t(nb) * 7 + 1);
                    if (e >= worst) {
                        worst = e;
                        where = fmt::format("{}x{} B={}", sh[1], sh[0], nb);
                    }
                }
            const double tol = (t == dtype::f16 || t == dtype::bf16) ? 1e-5 : 1e-10;
            report(worst <= tol, fmt::format("batch products {:<5} tensor cores vs dp4a/FMA: worst NMSE {:.3e} ({}), "
                                             "tol {:.0e}",
                                             dtype_name(t), worst, where, tol));
        } catch (const std::exception& e) {
            report(false, fmt::format("batch products {}: {}", dtype_name(t), e.what()));
        }
    }
}

void check_formats(const std::string& dir) {
    struct item {
        const char* preset;
        file_type type;
        double tol;
    };
    const item items[] = {
        {"tiny", file_type::all_f32, 1e-5},       {"tiny", file_type::f16, 1e-5},
        {"tiny", file_type::bf16, 1e-5},          {"tiny", file_type::q8_0, 1e-3},
        {"tiny", file_type::q4_0, 1e-3},          {"tiny", file_type::q4_k_m, 1e-3},
        {"tiny", file_type::q5_k_m, 1e-3},        {"tiny", file_type::q6_k, 1e-3},
        {"tiny-qwen2", file_type::q8_0, 1e-3},    {"tiny-phi3", file_type::f16, 1e-5},
        {"tiny-llama3", file_type::q4_k_m, 1e-3},
    };
    for (const auto& it : items) {
        try {
            const std::string path = test::make_synthetic(dir, it.preset, it.type);
            const auto r = test::compare_logits(path, 16);
            report(r.worst_nmse <= it.tol,
                   fmt::format("logits {:<12} {:<7} worst NMSE over {} steps {:.3e} (tol {:.0e})", it.preset,
                               file_type_name(it.type), r.steps, r.worst_nmse, it.tol));
            const std::string name = fmt::format("{} {}", it.preset, file_type_name(it.type));
            check_prefill_batch(name, path, it.tol, true);
            if (it.type == file_type::f16 || it.type == file_type::q4_k_m) {
                cuda::prefill_options o;
                o.reference_attention = true;
                cuda::set_prefill_options(o);
                check_prefill_batch(name + " ref-attn", path, it.tol, false);
                o = {};
                o.dequant_chunk_bytes = 1;  // slices of 128 rows: covers the slice loop
                cuda::set_prefill_options(o);
                check_prefill_batch(name + " 128-row", path, it.tol, false);
                o = {};
                o.reference_batch_products = true;
                cuda::set_prefill_options(o);
                try {
                    {
                        auto d = cuda::decoder::load(gguf_file::open(path), 64);
                        const auto [e, where] = d->make_batch(4, 64)->check_products(4);
                        report(e <= 1e-5,
                               fmt::format("products {:<22} model weights, tensor cores vs dp4a/FMA: worst NMSE {:.3e} "
                                           "({})",
                                           name, e, where));
                    }
                    const auto b = test::compare_batch(path, 4, 6);
                    report(b.worst_nmse <= it.tol && b.token_mismatches == 0,
                           fmt::format("batch   {:<22} dp4a/FMA products: NMSE {:.3e}, {} argmax mismatches", name,
                                       b.worst_nmse, b.token_mismatches));
                } catch (const std::exception& e) {
                    report(false, fmt::format("batch reference {}: {}", name, e.what()));
                }
                cuda::set_prefill_options({});
            }
        } catch (const std::exception& e) {
            report(false, fmt::format("logits {} {}: {}", it.preset, file_type_name(it.type), e.what()));
        }
    }
}

void check_greedy(const std::string& name, const std::string& path, int n) {
    try {
        const auto r = test::compare_greedy(path, 1, n);
        std::string head;
        for (size_t i = 0; i < std::min<size_t>(12, r.gpu.size()); i++) head += fmt::format("{} ", r.gpu[i]);
        report(r.first_mismatch < 0,
               fmt::format("greedy {}: {} tokens, first mismatch {} (gpu: {}...)", name, n, r.first_mismatch, head));
    } catch (const std::exception& e) {
        report(false, fmt::format("greedy {}: {}", name, e.what()));
    }
}

void bench(const cuda::bandwidth_probe& bw) {
    fmt::print("\nmatvec alone (one [n_out x n_in] product, cold weights, GB/s of weight bytes):\n");
    const dtype types[] = {dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::q8_0, dtype::q4_0, dtype::f16, dtype::bf16};
    for (dtype t : types) {
        const double a = cuda::bench_matvec(t, 4096, 14336, 20), b = cuda::bench_matvec(t, 14336, 4096, 20),
                     c = cuda::bench_matvec(t, 4096, 4096, 20);
        fmt::print("  {:<5} 4096->14336 {:7.0f}  14336->4096 {:7.0f}  4096->4096 {:7.0f}  ({:.2f} of probe)\n",
                   dtype_name(t), a, b, c, a / bw.hbm_read_gbs);
    }
    fmt::print("\nbatch-1 decode, llama3-8b shapes, random weights of each file type's tensor types:\n");
    const auto& preset = find_preset("llama3-8b");
    const file_type fts[] = {file_type::q4_k_m, file_type::q8_0, file_type::f16, file_type::q4_0, file_type::bf16};
    for (file_type ft : fts) {
        try {
            auto d = cuda::decoder::random(preset.config, ft, 512, 11);
            const int n = 128, warm = 16;
            const double s = d->bench_decode(n, warm, 1);
            const double tps = n / s;
            const double bytes = double(d->streamed_bytes_per_token());
            const double limit = bw.hbm_read_gbs * 1e9 / bytes;
            fmt::print(
                "  {:<7} tg{} {:7.1f} tok/s  {:6.2f} GB/token  {:6.0f} GB/s  limit {:6.1f} tok/s  ratio {:.3f}\n",
                file_type_name(ft), n, tps, bytes / 1e9, bytes * tps / 1e9, limit, tps / limit);
            fmt::print("          {}\n", d->summary());
            std::fflush(stdout);
        } catch (const std::exception& e) {
            report(false, fmt::format("bench {}: {}", file_type_name(ft), e.what()));
        }
    }
}

void bench_prefill_batch(const std::string& only) {
    const auto& preset = find_preset("llama3-8b");
    fmt::print(
        "\ncuBLAS f16 GEMM alone, 512 tokens (TFLOPS): 4096->6144 {:.0f}, 4096->4096 {:.0f}, 4096->28672 {:.0f}, "
        "14336->4096 {:.0f}\n",
        cuda::bench_gemm_f16(512, 4096, 6144, 10), cuda::bench_gemm_f16(512, 4096, 4096, 10),
        cuda::bench_gemm_f16(512, 4096, 28672, 10), cuda::bench_gemm_f16(512, 14336, 4096, 10));
    fmt::print("\nprefill pp512, llama3-8b shapes, random weights (median of 3 after a warm-up):\n");
    const file_type fts[] = {file_type::q4_k_m, file_type::f16, file_type::q8_0, file_type::bf16, file_type::q4_0};
    for (file_type ft : fts) {
        if (!only.empty() && only != file_type_name(ft)) continue;
        try {
            auto d = cuda::decoder::random(preset.config, ft, 1024, 11);
            const double s = d->bench_prefill(512, 3);
            const auto& c = preset.config;
            const double layer_params = double(c.n_embd) * double(c.q_dim() + 2 * c.kv_dim()) +
                                        double(c.q_dim()) * c.n_embd + 3.0 * c.n_embd * c.n_ff;
            const double tflops = 2.0 * 512 * layer_params * c.n_layer / s / 1e12;
            fmt::print("  {:<7} pp512 {:8.0f} tok/s  ({:.2f} ms, layer GEMMs {:.0f} TFLOPS)\n", file_type_name(ft),
                       512 / s, s * 1e3, tflops);
            if (ft == file_type::q4_k_m || ft == file_type::f16) {
                cuda::prefill_options o;
                o.dequant_chunk_bytes = 1ull << 40;  // whole matrices
                cuda::set_prefill_options(o);
                const double s_whole = d->bench_prefill(512, 3);
                o = {};
                o.reference_attention = true;
                cuda::set_prefill_options(o);
                const double s_ref = d->bench_prefill(512, 1);
                cuda::set_prefill_options({});
                const double s2 = d->bench_prefill(512, 3);
                const double s_long = d->bench_prefill(1024, 2);
                fmt::print(
                    "          same run: whole-matrix dequant {:.0f} tok/s, scalar attention {:.0f} tok/s, "
                    "default again {:.0f} tok/s, pp1024 {:.0f} tok/s\n",
                    512 / s_whole, 512 / s_ref, 512 / s2, 1024 / s_long);
            }
            // Batched decode: aggregate tok/s of b sequences per step vs the batch-1 decode graph.
            const double single = 128 / d->bench_decode(128, 16, 1);
            auto batch = d->make_batch(16, 256);
            fmt::print("          decode: single-sequence graph {:.1f} tok/s; batched aggregate:", single);
            for (int b : {1, 2, 4, 8, 16}) {
                const double bs = batch->bench(b, 64, 8, 1);
                fmt::print(" B={} {:.0f} ({:.2f}x)", b, b * 64 / bs, b * 64 / bs / single);
            }
            cuda::prefill_options o;
            o.reference_batch_products = true;
            cuda::set_prefill_options(o);
            auto ref = d->make_batch(16, 256);
            fmt::print("; dp4a/FMA products:");
            for (int b : {2, 4, 8, 16}) {
                const double rs = ref->bench(b, 64, 8, 1);
                fmt::print(" B={} {:.0f} ({:.2f}x)", b, b * 64 / rs, b * 64 / rs / single);
            }
            cuda::set_prefill_options({});
            fmt::print("\n");
            std::fflush(stdout);
        } catch (const std::exception& e) {
            report(false, fmt::format("bench prefill/batch {}: {}", file_type_name(ft), e.what()));
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::string stories, kjv, tmp = "/tmp/memtile-cuda-check";
    bool do_bench = true, do_checks = true, do_old_bench = true;
    std::string only;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--stories" && i + 1 < argc)
            stories = argv[++i];
        else if (a == "--kjv" && i + 1 < argc)
            kjv = argv[++i];
        else if (a == "--tmp" && i + 1 < argc)
            tmp = argv[++i];
        else if (a == "--no-bench")
            do_bench = false;
        else if (a == "--bench-only")
            do_checks = false;
        else if (a == "--no-decode-bench")
            do_old_bench = false;
        else if (a == "--only" && i + 1 < argc)
            only = argv[++i];
    }
    fmt::print("device: {}\n", cuda::device_description());
    if (cuda::device_count() == 0) {
        fmt::print("SKIPPED: no CUDA device\n");
        return 0;
    }
    try {
        std::filesystem::create_directories(tmp);
        const auto bw = cuda::probe_bandwidth();
        fmt::print("probe: HBM read {:.0f} GB/s, L2 read {:.0f} GB/s\n", bw.hbm_read_gbs, bw.l2_read_gbs);
        if (do_checks) {
            check_batch_products();
            check_formats(tmp);
            if (!stories.empty()) {
                const std::string g = tmp + "/stories260K.gguf";
                import_llama2c(stories, g);
                check_greedy("stories260K", g, 200);
                check_prefill_batch("stories260K", g, 1e-3, true, 100, 100);
            }
            if (!kjv.empty()) {
                check_greedy("memtile-kjv-q8_0", kjv, 200);
                check_prefill_batch("memtile-kjv-q8_0", kjv, 1e-3, true, 300, 212);
                try {
                    const auto b = test::compare_batch_greedy(kjv, 8, 48);
                    report(b.mismatches == 0,
                           fmt::format("batch greedy memtile-kjv-q8_0: 8 sequences x 48 tokens, {} differ from "
                                       "single-sequence decode (first at step {})",
                                       b.mismatches, b.first_mismatch_step));
                } catch (const std::exception& e) {
                    report(false, fmt::format("batch greedy kjv: {}", e.what()));
                }
            }
        }
        if (do_bench && do_old_bench) bench(bw);
        if (do_bench) bench_prefill_batch(only);
    } catch (const std::exception& e) {
        report(false, e.what());
    }
    fmt::print("\n{} failure(s)\n", failures);
    return failures == 0 ? 0 : 1;
}
