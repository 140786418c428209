// Host side of the GPU sampler (gpu-sampler.h): buffers, the order of the steps, and the check entry point
// cuda::logits_sampler (host logits -> the same kernels).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backends/cuda/cuda-backend.h"
#include "backends/cuda/gpu-sampler.h"
#include "core/error.h"
#include "sampling/sampler.h"

namespace memtile::cuda {
namespace {

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail("cuda", "{} failed: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

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
    out_dev_ = device_alloc<int32_t>(1);
    check(cudaMallocHost(reinterpret_cast<void**>(&out_host_), sizeof(int32_t)), "cudaMallocHost");
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

void device_sampler::enqueue(const float* logits, const sampling_draw& d, const int32_t* argmax) {
    const sampling_params& p = d.params;
    if (d.penalty_ids.size() != d.penalty_counts.size())
        fail("cuda", "sampling draw with {} penalty ids but {} counts", d.penalty_ids.size(), d.penalty_counts.size());
    const int n_pen = int(d.penalty_ids.size());
    const float* src = logits;
    if (n_pen > 0) {
        if (size_t(n_pen) > pen_cap_) {
            // The previous draw's copy from the pinned mirror has completed (sample() waits for the stream).
            check(cudaStreamSynchronize(stream_), "sampler");
            if (pen_dev_) cudaFree(pen_dev_);
            if (pen_host_) cudaFreeHost(pen_host_);
            pen_cap_ = std::max<size_t>(size_t(n_pen), 64);
            pen_dev_ = device_alloc<int32_t>(2 * pen_cap_);
            check(cudaMallocHost(reinterpret_cast<void**>(&pen_host_), 2 * pen_cap_ * sizeof(int32_t)),
                  "cudaMallocHost");
        }
        std::memcpy(pen_host_, d.penalty_ids.data(), size_t(n_pen) * sizeof(int32_t));
        std::memcpy(pen_host_ + n_pen, d.penalty_counts.data(), size_t(n_pen) * sizeof(int32_t));
        check(
            cudaMemcpyAsync(pen_dev_, pen_host_, 2 * size_t(n_pen) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
            "copy penalties");
        check(cudaMemcpyAsync(keys_, logits, size_t(n_) * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
              "copy logits");
        launch_penalties(keys_, pen_dev_, pen_dev_ + n_pen, n_pen, n_, p.repeat_penalty, p.presence_penalty,
                         p.frequency_penalty, stream_);
        src = keys_;
    }
    if (p.temperature <= 0) {
        if (n_pen == 0 && argmax)
            check(cudaMemcpyAsync(out_dev_, argmax, sizeof(int32_t), cudaMemcpyDeviceToDevice, stream_), "copy argmax");
        else
            launch_argmax_id(src, n_, out_dev_, stream_);
    } else {
        launch_sort_desc(temp_, temp_bytes_, src, sorted_keys_, ids_, sorted_ids_, n_, stream_);
        sample_params sp;
        sp.temperature = p.temperature;
        sp.top_k = p.top_k;
        sp.top_p = p.top_p;
        sp.min_p = p.min_p;
        sp.u = d.u;
        launch_sample_sorted(sorted_keys_, sorted_ids_, n_, sp, probs_, out_dev_, stream_);
    }
    check(cudaGetLastError(), "sampling kernels");
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

private:
    cudaStream_t stream_ = nullptr;
    float* logits_ = nullptr;
    std::unique_ptr<device_sampler> sampler_;
};

}  // namespace

std::unique_ptr<logits_sampler> logits_sampler::create(int n_vocab) {
    return std::make_unique<logits_sampler_impl>(n_vocab);
}

}  // namespace memtile::cuda
