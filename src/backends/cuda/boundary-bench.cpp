// bench_boundaries (cuda-backend.h), the host side: the slices' units, the chains' graphs, the alternated timing. The
// kernels and what they read are in boundary-bench.cu.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "backends/cuda/boundary-bench.h"
#include "backends/cuda/cuda-backend.h"
#include "backends/cuda/host-util.h"

namespace memtile::cuda {

std::vector<boundary_figures> bench_boundaries(const std::vector<uint64_t>& slice_bytes, const std::vector<int>& forms,
                                               int reps) {
    using detail::boundary_slice;
    constexpr uint64_t unit = detail::k_boundary_unit_bytes;
    static_assert(k_boundary_forms == 4 + detail::k_boundary_persistent_forms);
    const int n = int(slice_bytes.size());
    if (n < 2 || reps < 1) fail("cuda", "boundary bench: needs at least 2 slices and 1 repetition");
    for (int f : forms)
        if (f < 0 || f >= k_boundary_forms) fail("cuda", "boundary bench: no form {} (0..{})", f, k_boundary_forms - 1);
    require_device();
    int sms = 0, per_sm = 0, per_sm_wide = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
    // The persistent forms' grids: what every one of their kernels keeps resident (the cooperative launch checks it).
    check(detail::boundary_persistent_blocks_per_sm(false, per_sm), "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    check(detail::boundary_persistent_blocks_per_sm(true, per_sm_wide),
          "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    const int grid_p = std::max(1, per_sm) * sms, grid_w = std::max(1, per_sm_wide) * sms;
    const int subs_w = grid_w * detail::k_wide_sub;

    // Units per slice: bytes / 8 KiB rounded up; a slice without bytes still has units (one per SM in the chains, one
    // per sub-block in the persistent forms) that write its outputs and read the previous ones.
    std::vector<boundary_slice> chain(static_cast<size_t>(n)), narrow(chain), wide(chain);
    long long byte_units = 0, chain_y = 0, narrow_y = 0, wide_y = 0;
    int max_units = std::max({sms, grid_p, subs_w});
    for (int i = 0; i < n; i++) {
        const auto u = int(std::min<uint64_t>((slice_bytes[size_t(i)] + unit - 1) / unit, 1u << 30));
        const long long first = u ? byte_units : -1;
        chain[size_t(i)] = {u ? u : sms, first, chain_y};
        narrow[size_t(i)] = {u ? u : grid_p, first, narrow_y};
        wide[size_t(i)] = {u ? u : subs_w, first, wide_y};
        byte_units += u;
        chain_y += chain[size_t(i)].units;
        narrow_y += narrow[size_t(i)].units;
        wide_y += wide[size_t(i)].units;
        max_units = std::max(max_units, u);
    }
    const uint64_t bytes = uint64_t(byte_units) * unit;

    device_arena arena;
    auto* w = bytes ? static_cast<uint8_t*>(arena.get(bytes)) : nullptr;
    if (w) check(cudaMemset(w, 0x5a, bytes), "cudaMemset");
    float* ys = static_cast<float*>(arena.get(sizeof(float) * uint64_t(std::max({chain_y, narrow_y, wide_y}))));
    float* x0 = static_cast<float*>(arena.get(sizeof(float) * uint64_t(max_units)));
    check(cudaMemset(x0, 0, sizeof(float) * uint64_t(max_units)), "cudaMemset");
    auto* bar = static_cast<unsigned*>(arena.get(sizeof(unsigned) * detail::k_barrier_words));
    auto upload = [&](const std::vector<boundary_slice>& v) {
        auto* d = static_cast<boundary_slice*>(arena.get(sizeof(boundary_slice) * v.size()));
        check(cudaMemcpy(d, v.data(), sizeof(boundary_slice) * v.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
        return d;
    };
    const boundary_slice* narrow_d = upload(narrow);
    const boundary_slice* wide_d = upload(wide);
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");

    // The chains (forms 1-3) as graphs of one launch per slice, captured once per form.
    std::vector<cudaGraphExec_t> graphs(k_boundary_forms, nullptr);
    for (int f : forms) {
        if (f < 1 || f > 3 || graphs[size_t(f)]) continue;
        check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        for (int i = 0; i < n; i++) {
            const auto& c = chain[size_t(i)];
            const float* x = i ? ys + chain[size_t(i - 1)].y_at : x0;
            const int nx = i ? chain[size_t(i - 1)].units : 1;
            check(detail::launch_boundary_chain(f == 2, f != 3, c.units, c.first >= 0 ? w + c.first * unit : nullptr, x,
                                                nx, ys + c.y_at, s),
                  "boundary bench launch");
        }
        cudaGraph_t g = nullptr;
        check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
        check(cudaGraphInstantiate(&graphs[size_t(f)], g, 0), "cudaGraphInstantiate");
        cudaGraphDestroy(g);
    }
    // Forms 4-16: the persistent forms 0-12 of boundary-bench.h.
    const auto is_wide = [](int f) { return f >= 4 && detail::boundary_persistent_wide(f - 4); };
    const auto run = [&](int f) {
        if (f == 0)  // every slice's bytes as one launch of one-unit blocks: no boundary
            check(detail::launch_boundary_chain(false, false, bytes ? int(byte_units) : sms * n, w, x0, 1, ys, s),
                  "boundary bench launch");
        else if (f >= 4)
            check(detail::launch_boundary_persistent(f - 4, is_wide(f) ? grid_w : grid_p, w,
                                                     is_wide(f) ? wide_d : narrow_d, n, x0, 1, ys, bar, s),
                  "boundary bench cooperative launch");
        else
            check(cudaGraphLaunch(graphs[size_t(f)], s), "cudaGraphLaunch");
    };
    cudaEvent_t a = nullptr, b = nullptr;
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    std::vector<std::vector<double>> us(forms.size());
    // Every form once untimed, then the forms alternated `reps` times (callers size the slices to total many times
    // the L2, so that each pass reads them from DRAM). The GPU is idle at each start, so the events also bracket the
    // host's submission of the graph or launch (a few us per run: under 1 % of a 2 GB pass).
    for (int r = -1; r < reps; r++)
        for (size_t k = 0; k < forms.size(); k++) {
            check(cudaMemsetAsync(bar, 0, sizeof(unsigned) * detail::k_barrier_words, s), "cudaMemsetAsync");
            check(cudaEventRecord(a, s), "cudaEventRecord");
            run(forms[k]);
            check(cudaEventRecord(b, s), "cudaEventRecord");
            check(cudaEventSynchronize(b), "boundary bench run");
            float ms = 0;
            check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
            if (r >= 0) us[k].push_back(double(ms) * 1e3);
        }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    for (auto g : graphs)
        if (g) cudaGraphExecDestroy(g);
    cudaStreamDestroy(s);
    std::vector<boundary_figures> out;
    for (size_t k = 0; k < forms.size(); k++) {
        auto& v = us[k];
        std::sort(v.begin(), v.end());
        const double t = v[v.size() / 2];
        const int f = forms[k];
        out.push_back({double(bytes) / (t * 1e-6) / 1e9, t / n,
                       f < 4        ? 0
                       : is_wide(f) ? grid_w
                                    : grid_p,
                       f < 4        ? 0
                       : is_wide(f) ? 1024
                                    : 128});
    }
    return out;
}

}  // namespace memtile::cuda
