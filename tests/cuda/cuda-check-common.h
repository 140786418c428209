// Shared by the translation units of memtile-cuda-check: cuda-check.cpp (the kernel-level checks and main),
// cuda-check-models.cpp (the model-level checks), cuda-bench.cpp (the benchmarks) and cuda-diagnose.cpp (the --diag
// diagnostics).
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/cuda-backend.h"

namespace memtile::cuda_check {

inline int failures = 0;  // FAIL lines printed so far

inline void report(bool ok, const std::string& what) {
    fmt::print("{} {}\n", ok ? "PASS" : "FAIL", what);
    std::fflush(stdout);
    if (!ok) failures++;
}

// A set_matvec_prefetch setting of the benches and checks, "TASKS,MASK[,CARVEOUT[,EARLY LEVEL]]" (early level 4 unless
// given; "-1": the default setting, "0,0": off).
struct prefetch_setting {
    int tasks = 0;
    unsigned mask = 0;
    int carveout = -1, early = 4;
    std::string name;
};
inline prefetch_setting parse_prefetch(const std::string& v) {
    prefetch_setting p;
    p.name = v;
    const char* c = v.c_str();
    char* end = nullptr;
    p.tasks = int(std::strtol(c, &end, 10));
    if (*end == ',') p.mask = unsigned(std::strtoul(end + 1, &end, 0));
    if (*end == ',') p.carveout = int(std::strtol(end + 1, &end, 10));
    if (*end == ',') p.early = int(std::strtol(end + 1, &end, 10));
    return p;
}
inline void apply(const prefetch_setting& p) {
    cuda::set_matvec_prefetch(p.tasks, p.mask, p.carveout);
    cuda::set_matvec_early(p.early);
}

// "a;b;c" -> {"a", "b", "c"}: the benches' lists of masks or levels (semicolons, as the shell passes them quoted;
// sep: another separator, e.g. the commas inside one entry).
inline std::vector<std::string> split_list(const std::string& s, char sep = ';') {
    std::vector<std::string> v;
    for (size_t a = 0; a < s.size();) {
        const size_t b = std::min(s.find(sep, a), s.size());
        v.push_back(s.substr(a, b - a));
        a = b + 1;
    }
    return v;
}

// The benchmarks (cuda-bench.cpp): decode, matvec and prefill figures of llama3-8b shapes against the HBM probe.
void bench(const cuda::bandwidth_probe& bw, bool sweep);
void bench_q6(const cuda::bandwidth_probe& bw, bool sweep, uint32_t n_ctx = 512);
// tg128 of a preset's shapes (llama3-8b) after each depth of `list` ("0,4096"); groups: attention settings
// (cuda::set_attention_group; "0,1" alternates the default and one head per block twice per depth; bench_depth);
// batch > 0: also the batched step of that many sequences, each at the depth.
void bench_depth(const cuda::bandwidth_probe& bw, const std::string& list, const std::string& only,
                 const std::string& groups, const std::string& preset = "llama3-8b", int batch = 0);
void bench_fusion(const cuda::bandwidth_probe& bw, const std::string& only, const std::string& masks);
void bench_q4k(const cuda::bandwidth_probe& bw, const std::string& modes);
void bench_boundary(const cuda::bandwidth_probe& bw, const std::string& list, const std::string& form_list);
void bench_early(const cuda::bandwidth_probe& bw, const std::string& list, const std::string& only);
void bench_norm(const cuda::bandwidth_probe& bw, const std::string& list, const std::string& only);
void bench_q6k(const cuda::bandwidth_probe& bw, const std::string& list, const std::string& only);
void bench_prefetch(const cuda::bandwidth_probe& bw, const std::string& list, const std::string& only);
void bench_batch_decode(const std::string& only);
void bench_batch_step(const std::string& only, const std::string& masks);
void bench_prefill_batch(const std::string& only);
void bench_sampling();
void bench_batch_sampling();

// The model-level checks (cuda-check-models.cpp), each printing PASS / FAIL lines through report(): name labels a
// model, path is a GGUF file, dir a scratch folder for synthetic models, kjv the shipped default model (or empty).
void check_prefill_batch(const std::string& name, const std::string& path, double tol, bool batch, int n_first = 70,
                         int n_second = 60);
void check_fusion_bits(const std::string& name, const std::string& path);
void check_norm_bits(const std::string& kjv);
void check_norm_k(const std::string& dir);
void check_prefetch_bits();
void check_norm_load_bits(const std::string& kjv);
// Per weight format of synthetic models; a non-empty preset keeps that preset's items alone (a reported failure
// when none uses it).
void check_formats(const std::string& dir, const std::string& preset = "");
void check_greedy(const std::string& name, const std::string& path, int n);

// The diagnostics (cuda-diagnose.cpp): dir a scratch folder for synthetic models, path a GGUF model.
void diagnose_q8_0(const std::string& dir);
void diagnose_determinism(const std::string& dir);
void diagnose_model(const std::string& path);
void diagnose_greedy(const std::string& path, int n);

}  // namespace memtile::cuda_check
