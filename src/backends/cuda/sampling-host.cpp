// Host side of the GPU sampler (gpu-sampler.h): buffers, the order of the steps, and the check entry point
// cuda::logits_sampler (host logits -> the same kernels).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>
#include <vector>

#include "backends/cuda/cuda-backend.h"
#include "backends/cuda/gpu-sampler.h"
#include "backends/cuda/host-util.h"
#include "core/error.h"
#include "sampling/sampler.h"

namespace memtile::cuda {
namespace {

template <typename T>
T* device_alloc(size_t n) {
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<size_t>(n * sizeof(T), 16)), "cudaMalloc");
    return static_cast<T*>(p);
}

}  // namespace

device_sampler::device_sampler(int n_vocab, cudaStream_t s) : n_(n_vocab), stream_(s) {
    if (n_vocab <= 0) fail("cuda", "sampler for an empty vocabulary");
    keys_ = device_alloc<float>(size_t(n_));
    sorted_keys_ = device_alloc<float>(size_t(n_));
    ids_ = device_alloc<int32_t>(size_t(n_));
    sorted_ids_ = device_alloc<int32_t>(size_t(n_));
    probs_ = device_alloc<float>(size_t(n_));
    temp_bytes_ = sort_temp_bytes(n_);
    temp_ = device_alloc<uint8_t>(temp_bytes_);
    reserve(0, 16);  // a batch of up to 16 rows without a reallocation
    launch_iota(ids_, n_, stream_);
    check(cudaGetLastError(), "iota");
}

device_sampler::~device_sampler() {
    if (stream_) cudaStreamSynchronize(stream_);
    for (void* p : {static_cast<void*>(keys_), static_cast<void*>(sorted_keys_), static_cast<void*>(ids_),
                    static_cast<void*>(sorted_ids_), static_cast<void*>(probs_), temp_, static_cast<void*>(pen_dev_),
                    static_cast<void*>(out_dev_)})
        if (p) cudaFree(p);
    if (pen_host_) cudaFreeHost(pen_host_);
    if (out_host_) cudaFreeHost(out_host_);
}

void device_sampler::reserve(size_t n_pen, size_t b) {
    if (n_pen > pen_cap_) {
        // Earlier copies from the pinned mirror may still be pending.
        check(cudaStreamSynchronize(stream_), "sampler");
        if (pen_dev_) cudaFree(pen_dev_);
        if (pen_host_) cudaFreeHost(pen_host_);
        pen_dev_ = nullptr;
        pen_host_ = nullptr;
        pen_cap_ = std::max<size_t>(n_pen, 64);
        pen_dev_ = device_alloc<int32_t>(2 * pen_cap_);
        check(cudaMallocHost(reinterpret_cast<void**>(&pen_host_), 2 * pen_cap_ * sizeof(int32_t)), "cudaMallocHost");
    }
    if (b > out_cap_) {
        check(cudaStreamSynchronize(stream_), "sampler");
        if (out_dev_) cudaFree(out_dev_);
        if (out_host_) cudaFreeHost(out_host_);
        out_dev_ = nullptr;
        out_host_ = nullptr;
        out_cap_ = std::max<size_t>(b, 16);
        out_dev_ = device_alloc<int32_t>(out_cap_);
        check(cudaMallocHost(reinterpret_cast<void**>(&out_host_), out_cap_ * sizeof(int32_t)), "cudaMallocHost");
    }
}

namespace {

int penalty_count(const sampling_draw& d) {
    if (d.penalty_ids.size() != d.penalty_counts.size())
        fail("cuda", "sampling draw with {} penalty ids but {} counts", d.penalty_ids.size(), d.penalty_counts.size());
    return int(d.penalty_ids.size());
}

}  // namespace

void device_sampler::enqueue_row(const float* logits, const sampling_draw& d, const int32_t* pen_ids,
                                 const int32_t* pen_counts, int n_pen, const int32_t* argmax, int32_t* out) {
    const sampling_params& p = d.params;
    const float* src = logits;
    if (n_pen > 0) {
        check(cudaMemcpyAsync(keys_, logits, size_t(n_) * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
              "copy logits");
        launch_penalties(keys_, pen_ids, pen_counts, n_pen, n_, p.repeat_penalty, p.presence_penalty,
                         p.frequency_penalty, stream_);
        src = keys_;
    }
    if (p.temperature <= 0) {
        if (n_pen == 0 && argmax)
            check(cudaMemcpyAsync(out, argmax, sizeof(int32_t), cudaMemcpyDeviceToDevice, stream_), "copy argmax");
        else
            launch_argmax_id(src, n_, out, stream_);
    } else {
        launch_sort_desc(temp_, temp_bytes_, src, sorted_keys_, ids_, sorted_ids_, n_, stream_);
        sample_params sp;
        sp.temperature = p.temperature;
        sp.top_k = p.top_k;
        sp.top_p = p.top_p;
        sp.min_p = p.min_p;
        sp.u = d.u;
        launch_sample_sorted(sorted_keys_, sorted_ids_, n_, sp, probs_, out, stream_);
    }
    check(cudaGetLastError(), "sampling kernels");
}

void device_sampler::enqueue(const float* logits, const sampling_draw& d, const int32_t* argmax) {
    const int n_pen = penalty_count(d);
    reserve(size_t(n_pen), 1);
    if (n_pen > 0) {
        std::memcpy(pen_host_, d.penalty_ids.data(), size_t(n_pen) * sizeof(int32_t));
        std::memcpy(pen_host_ + n_pen, d.penalty_counts.data(), size_t(n_pen) * sizeof(int32_t));
        check(
            cudaMemcpyAsync(pen_dev_, pen_host_, 2 * size_t(n_pen) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
            "copy penalties");
    }
    enqueue_row(logits, d, pen_dev_, pen_dev_ + n_pen, n_pen, argmax, out_dev_);
}

const int32_t* device_sampler::sample_rows(const float* logits, const sampling_draw* draws_ptr, int n_rows,
                                           const int32_t* argmax) {
    if (n_rows <= 0) fail("cuda", "sample_rows() of {} rows", n_rows);
    const size_t b = size_t(n_rows);
    const std::span<const sampling_draw> draws(draws_ptr, b);
    size_t total = 0;
    for (const auto& d : draws) total += size_t(penalty_count(d));
    reserve(total, b);
    // Every row's ids, then every row's counts: one upload. The previous call waited for its copies, so the
    // pinned mirror is free.
    if (total > 0) {
        size_t at = 0;
        for (const auto& d : draws) {
            std::memcpy(pen_host_ + at, d.penalty_ids.data(), d.penalty_ids.size() * sizeof(int32_t));
            std::memcpy(pen_host_ + total + at, d.penalty_counts.data(), d.penalty_counts.size() * sizeof(int32_t));
            at += d.penalty_ids.size();
        }
        check(cudaMemcpyAsync(pen_dev_, pen_host_, 2 * total * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
              "copy penalties");
    }
    size_t at = 0;
    for (size_t i = 0; i < b; i++) {
        const int n_pen = int(draws[i].penalty_ids.size());
        enqueue_row(logits + i * size_t(n_), draws[i], pen_dev_ + at, pen_dev_ + total + at, n_pen,
                    argmax ? argmax + i : nullptr, out_dev_ + i);
        at += size_t(n_pen);
    }
    check(cudaMemcpyAsync(out_host_, out_dev_, b * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_), "copy tokens");
    check(cudaStreamSynchronize(stream_), "sampling");
    return out_host_;
}

int32_t device_sampler::sample(const float* logits, const sampling_draw& d, const int32_t* argmax) {
    enqueue(logits, d, argmax);
    check(cudaMemcpyAsync(out_host_, out_dev_, sizeof(int32_t), cudaMemcpyDeviceToHost, stream_), "copy token");
    check(cudaStreamSynchronize(stream_), "sampling");
    return *out_host_;
}

namespace {

class logits_sampler_impl final : public logits_sampler {
public:
    explicit logits_sampler_impl(int n_vocab) {
        require_device();
        check(cudaSetDevice(0), "cudaSetDevice");
        check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        logits_ = device_alloc<float>(size_t(n_vocab));
        sampler_ = std::make_unique<device_sampler>(n_vocab, stream_);
    }
    ~logits_sampler_impl() override {
        sampler_.reset();
        cudaFree(logits_);
        if (rows_) cudaFree(rows_);
        if (argmax_) cudaFree(argmax_);
        cudaStreamDestroy(stream_);
    }
    void set_logits(std::span<const float> logits) override {
        if (logits.size() != size_t(sampler_->n_vocab()))
            fail("cuda", "set_logits(): {} values for a vocabulary of {}", logits.size(), sampler_->n_vocab());
        check(cudaMemcpyAsync(logits_, logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice, stream_),
              "upload logits");
        check(cudaStreamSynchronize(stream_), "upload logits");
    }
    int32_t sample(const sampling_draw& d) override { return sampler_->sample(logits_, d); }
    double bench(const sampling_draw& d, int reps) override {
        sampler_->sample(logits_, d);  // warm-up
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; i++) sampler_->sample(logits_, d);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / std::max(reps, 1);
    }

    std::vector<int32_t> sample_rows(std::span<const float> logits, std::span<const sampling_draw> draws,
                                     bool with_argmax) override {
        const size_t n = size_t(sampler_->n_vocab()), b = draws.size();
        if (b == 0 || logits.size() != b * n)
            fail("cuda", "sample_rows(): {} values for {} rows of {}", logits.size(), b, n);
        if (b > rows_cap_) {
            check(cudaStreamSynchronize(stream_), "sample_rows");
            if (rows_) cudaFree(rows_);
            if (argmax_) cudaFree(argmax_);
            rows_ = nullptr;
            argmax_ = nullptr;
            rows_ = device_alloc<float>(b * n);
            argmax_ = device_alloc<int32_t>(b);
            rows_cap_ = b;
        }
        check(cudaMemcpyAsync(rows_, logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice, stream_),
              "upload logits");
        if (with_argmax)
            for (size_t i = 0; i < b; i++) launch_argmax_id(rows_ + i * n, int(n), argmax_ + i, stream_);
        with_argmax_ = with_argmax;
        const int32_t* ids = sampler_->sample_rows(rows_, draws.data(), int(b), with_argmax ? argmax_ : nullptr);
        return {ids, ids + b};
    }
    double bench_rows(std::span<const sampling_draw> draws, int reps) override {
        if (draws.empty() || draws.size() > rows_cap_) fail("cuda", "bench_rows(): {} rows uploaded", rows_cap_);
        const int32_t* am = with_argmax_ ? argmax_ : nullptr;
        const int b = int(draws.size());
        sampler_->sample_rows(rows_, draws.data(), b, am);  // warm-up
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; i++) sampler_->sample_rows(rows_, draws.data(), b, am);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / std::max(reps, 1);
    }

private:
    cudaStream_t stream_ = nullptr;
    float* logits_ = nullptr;
    float* rows_ = nullptr;      // [rows_cap_, n_vocab]
    int32_t* argmax_ = nullptr;  // [rows_cap_]
    size_t rows_cap_ = 0;
    bool with_argmax_ = false;
    std::unique_ptr<device_sampler> sampler_;
};

}  // namespace

std::unique_ptr<logits_sampler> logits_sampler::create(int n_vocab) {
    return std::make_unique<logits_sampler_impl>(n_vocab);
}

}  // namespace memtile::cuda
