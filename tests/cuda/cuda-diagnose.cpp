// The --diag diagnostics of memtile-cuda-check (cuda-check-common.h): where the GPU's logits or greedy tokens part
// from the CPU engine's, per CPU path, per matrix and per step. They print findings; the checks (cuda-check.cpp)
// decide PASS / FAIL.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/cpu-isa.h"
#include "backends/cpu/matmul.h"
#include "backends/cuda/cuda-backend.h"
#include "core/thread-pool.h"
#include "cuda/cuda-check-common.h"
#include "gguf/gguf-file.h"
#include "models/transformer.h"
#include "quant/quant.h"
#include "support/cuda-checks.h"
#include "support/reference-model.h"

namespace memtile::cuda_check {

// Where the tiny Q8_0 logits differ from the CPU engine: repeat the comparison, and with each CPU path.
void diagnose_q8_0(const std::string& dir) {
    const std::string path = test::make_synthetic(dir, "tiny", file_type::q8_0);
    for (const char* isa : {"auto", "auto", "avx2", "scalar"}) {
        try {
            cpu::force_isa(isa);
            const auto r = test::compare_logits(path, 16);
            fmt::print("  diag tiny Q8_0, CPU path {} ({}): worst NMSE {:.3e}\n", isa, cpu::matmul_path(dtype::q8_0),
                       r.worst_nmse);
        } catch (const std::exception& e) {
            fmt::print("  diag tiny Q8_0, CPU path {}: {}\n", isa, e.what());
        }
    }
    cpu::force_isa("auto");
}

// Which engine is not deterministic: the logits of two runs of each engine on the same tokens.
void diagnose_determinism(const std::string& dir) {
    for (file_type ft : {file_type::q8_0, file_type::q5_k_m, file_type::q4_k_m, file_type::f16}) {
        const std::string path = test::make_synthetic(dir, "tiny", ft);
        auto m = transformer::load(path);
        const uint32_t V = m->config().n_vocab;
        double cc = 0, gg = 0, cg = 0;
        for (int rep = 0; rep < 3; rep++) {
            thread_pool pool(std::min(thread_pool::default_threads(), 16));
            forward_context c1(*m, 17, dtype::f16, pool), c2(*m, 17, dtype::f16, pool);
            auto g1 = cuda::decoder::load(gguf_file::open(path), 17),
                 g2 = cuda::decoder::load(gguf_file::open(path), 17);
            for (int i = 0; i < 16; i++) {
                const int32_t t = int32_t((7 + 37 * uint32_t(i)) % V);
                const auto a = c1.forward(std::span<const int32_t>(&t, 1));
                const std::vector<float> ca(a.begin(), a.end());
                const auto b = c2.forward(std::span<const int32_t>(&t, 1));
                const std::vector<float> cb(b.begin(), b.end());
                const auto x = g1->forward(t);
                const std::vector<float> ga(x.begin(), x.end());
                const auto y = g2->forward(t);
                cc = std::max(cc, test::nmse(cb, ca));
                gg = std::max(gg, test::nmse(y, ga));
                cg = std::max(cg, test::nmse(ga, ca));
            }
        }
        fmt::print("  diag tiny {:<7} 3x16 steps: CPU vs CPU {:.1e}, GPU vs GPU {:.1e}, GPU vs CPU {:.1e}\n",
                   file_type_name(ft), cc, gg, cg);
        std::fflush(stdout);
    }
}

// Every matrix of a model file through the GPU matvec and the CPU matmul (random activations), and the
// logits NMSE of the first steps.
void diagnose_model(const std::string& path) {
    auto g = gguf_file::open(path);
    thread_pool pool(std::min(thread_pool::default_threads(), 16));
    std::string worst_line;
    double worst = 0;
    for (const auto& t : g->tensors()) {
        const dtype ok[] = {dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::f16, dtype::bf16};
        if (t.dims.size() < 2 || std::find(std::begin(ok), std::end(ok), t.type) == std::end(ok)) continue;
        const auto n_in = int64_t(t.dims[0]), n_out = int64_t(t.n_rows());
        std::vector<float> x(static_cast<size_t>(n_in));
        uint64_t z = 99;
        for (auto& v : x) {
            z = z * 6364136223846793005ull + 1442695040888963407ull;
            v = float(int64_t(z >> 40) % 2001 - 1000) / 400.0f;
        }
        cpu::weight_view view{t.type, t.data, n_in, n_out, row_bytes(t.type, uint64_t(n_in))};
        auto pw = cpu::prepare_weight(view);
        std::vector<float> cy(static_cast<size_t>(n_out));
        cpu::matmul(*pw, x.data(), 1, cy.data(), pool);
        const auto gy = cuda::matvec_gguf_rows(t.type, t.data, n_in, n_out, x.data());
        const double e = test::nmse(gy, cy);
        if (e > 1e-10)
            fmt::print("  diag {}: {} {} {}x{} NMSE {:.1e}\n", path, t.name, dtype_name(t.type), n_out, n_in, e);
        if (e >= worst) {
            worst = e;
            worst_line = t.name;
        }
    }
    fmt::print("  diag {}: worst matvec NMSE {:.1e} ({})\n", path, worst, worst_line);
    auto m = transformer::load(path);
    forward_context ctx(*m, 8, dtype::f16, pool), ctx32(*m, 8, dtype::f32, pool);
    auto d = cuda::decoder::load(g, 8);
    test::reference_model ref(*g);
    std::string steps, steps32, ref_gpu, ref_cpu;
    std::vector<float> gpu1, cpu1;
    for (int i = 0; i < 6; i++) {
        const int32_t tok = int32_t((7 + 37 * uint32_t(i)) % m->config().n_vocab);
        const auto cl = ctx.forward(std::span<const int32_t>(&tok, 1));
        const std::vector<float> cpu(cl.begin(), cl.end());
        const auto c32 = ctx32.forward(std::span<const int32_t>(&tok, 1));
        const std::vector<float> cpu32(c32.begin(), c32.end());
        const auto gl = d->forward(tok);
        const std::vector<float> gpu(gl.begin(), gl.end());
        const std::vector<float> r = ref.step(tok);
        if (i == 1) {
            gpu1 = gpu;
            cpu1 = cpu;
        }
        steps += fmt::format(" {:.1e}", test::nmse(gpu, cpu));
        steps32 += fmt::format(" {:.1e}", test::nmse(cpu32, cpu));
        ref_gpu += fmt::format(" {:.1e}", test::nmse(gpu, r));
        ref_cpu += fmt::format(" {:.1e}", test::nmse(cpu, r));
    }
    fmt::print(
        "  diag {}: logits NMSE per step GPU vs CPU{}; CPU f32 KV vs CPU{}; GPU vs f32 reference{}; CPU vs "
        "reference{}\n",
        path, steps, steps32, ref_gpu, ref_cpu);
    // The second step's logits once more by the CPU's batch path (both tokens as one prompt).
    forward_context cb(*m, 8, dtype::f16, pool);
    const int32_t two[2] = {int32_t(7 % m->config().n_vocab), int32_t(44 % m->config().n_vocab)};
    const auto bl = cb.forward(std::span<const int32_t>(two, 2));
    const std::vector<float> batch(bl.begin(), bl.end());
    fmt::print("  diag {}: step 1 vs the CPU batch path: GPU {:.1e}, CPU decode {:.1e}\n", path,
               test::nmse(gpu1, batch), test::nmse(cpu1, batch));
}

// At the first step where greedy tokens differ: the CPU's two best logits and the GPU's values for them.
void diagnose_greedy(const std::string& path, int n) {
    auto m = transformer::load(path);
    thread_pool pool(std::min(thread_pool::default_threads(), 16));
    forward_context ctx(*m, uint32_t(n + 1), dtype::f16, pool);
    auto d = cuda::decoder::load(gguf_file::open(path), uint32_t(n + 1));
    int32_t t = 1;
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const auto cl = ctx.forward(std::span<const int32_t>(&t, 1));
        const std::vector<float> cpu(cl.begin(), cl.end());
        const auto gl = d->forward(t);
        const std::vector<float> gpu(gl.begin(), gl.end());
        worst = std::max(worst, test::nmse(gpu, cpu));
        const auto c1 = int32_t(std::max_element(cpu.begin(), cpu.end()) - cpu.begin());
        const auto g1 = int32_t(std::max_element(gpu.begin(), gpu.end()) - gpu.begin());
        if (c1 != g1) {
            fmt::print(
                "  diag greedy: step {} CPU picks {} ({:.7g} vs {} {:.7g}), GPU has {:.7g} and {:.7g}; worst NMSE "
                "so far {:.1e}\n",
                i, c1, cpu[size_t(c1)], g1, cpu[size_t(g1)], gpu[size_t(c1)], gpu[size_t(g1)], worst);
            return;
        }
        t = c1;
    }
    fmt::print("  diag greedy: {} steps equal, worst NMSE {:.1e}\n", n, worst);
}

}  // namespace memtile::cuda_check
