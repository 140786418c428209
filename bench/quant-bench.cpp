// Throughput of the scalar reference quantizers and dequantizers on a 1024 x 4096 Gaussian matrix.
// Usage: bench-quant-bench [rows]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "guarded-main.h"
#include "quant/quant.h"

using namespace memtile;

static int bench_main(int argc, char** argv) {
    const int64_t n_rows = argc > 1 ? std::atoll(argv[1]) : 1024, row_len = 4096;
    std::vector<float> x(size_t(n_rows * row_len));
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    for (float& v : x) v = dist(rng);
    std::vector<float> y(x.size());
    const double mb = double(x.size()) * sizeof(float) / 1e6;
    std::printf("%-6s %14s %14s\n", "type", "quantize MB/s", "dequant MB/s");
    for (dtype t :
         {dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::q8_k}) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::vector<uint8_t> q = quantize_tensor(t, x.data(), n_rows, row_len);
        const auto t1 = std::chrono::steady_clock::now();
        dequantize_rows(t, q.data(), y.data(), n_rows, row_len);
        const auto t2 = std::chrono::steady_clock::now();
        const double tq = std::chrono::duration<double>(t1 - t0).count();
        const double td = std::chrono::duration<double>(t2 - t1).count();
        std::printf("%-6s %14.1f %14.1f\n", std::string(dtype_name(t)).c_str(), mb / tq, mb / td);
    }
    return 0;
}

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, bench_main);
}
