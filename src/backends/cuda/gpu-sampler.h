// Sampling on the GPU: sampler.cpp's pipeline (penalties over the recent window, temperature, top-k, top-p,
// min-p, the draw with the host's uniform number) on device-resident logits, returning one token id, so that a
// decode step copies 4 bytes to the host instead of [n_vocab] floats. memtile::sampler stays the reference.
//
// Steps on the decoder's stream: the penalties (a few ids) on a copy of the logits; greedy: the block argmax;
// else a stable CUB radix sort of (logit, id) pairs in descending order (ties: lowest id first, as the host's
// comparator), then one block takes the top-k survivors: softmax at the temperature, min-p, top-p and the draw.
// Up to seq_max survivors (top-k 40 by default) one thread sums in sampler.cpp's order, so the float and double
// arithmetic is the host's step for step (exp: double exp rounded to float, where glibc's expf errs by at most
// 0.502 ulp); more survivors (top-k off or large) use block-wide scans whose sums round differently in the
// last bits, which changes a token only when the draw lands within ~1e-16 of a boundary.
//
// No CUDA C++ here beyond cudaStream_t: included by the kernels (nvcc, C++17) and the host code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace memtile {
struct sampling_draw;
}

namespace memtile::cuda {

// Survivor counts up to this are summed by one thread in the host's order (see above).
constexpr int sample_seq_max = 1024;

struct sample_params {
    float temperature = 0.8f;  // > 0 (greedy does not reach the sort)
    int top_k = 40;            // <= 0 or >= n: every token
    float top_p = 0.95f;       // >= 1: off
    float min_p = 0.05f;       // <= 0: off
    double u = 0;              // uniform in [0, 1) from the host sampler's stream
};

// Launchers (sampling.cu). keys/ids: [n] device arrays.
size_t sort_temp_bytes(int n);
// keys_out/ids_out = (keys_in, ids_in) sorted by descending key, stable (equal keys keep the order of ids_in).
void launch_sort_desc(void* temp, size_t temp_bytes, const float* keys_in, float* keys_out, const int32_t* ids_in,
                      int32_t* ids_out, int n, cudaStream_t s);
void launch_iota(int32_t* ids, int n, cudaStream_t s);  // ids[i] = i
// keys[ids[i]] penalised as sampler.cpp does (repeat: divide positive logits, multiply negative ones; then
// subtract presence + frequency x counts[i]); ids outside [0, n) are skipped; ids distinct.
void launch_penalties(float* keys, const int32_t* ids, const int32_t* counts, int n_pen, int n, float repeat,
                      float presence, float frequency, cudaStream_t s);
void launch_argmax_id(const float* keys, int n, int32_t* out, cudaStream_t s);  // *out = argmax (ties: lowest)
// *out = the drawn id from the sorted pairs ([n]); probs: [n] f32 scratch (used when top-k keeps > seq_max).
void launch_sample_sorted(const float* sorted_keys, const int32_t* sorted_ids, int n, const sample_params& p,
                          float* probs, int32_t* out, cudaStream_t s);

// The pipeline's buffers for one vocabulary size on one stream (sampling-host.cpp).
class device_sampler {
public:
    device_sampler(int n_vocab, cudaStream_t s);
    ~device_sampler();
    device_sampler(const device_sampler&) = delete;
    device_sampler& operator=(const device_sampler&) = delete;

    // The token sampler::sample() would draw from logits ([n_vocab] f32, device) with d's parameters, recent
    // window and uniform number. argmax: a device int already holding argmax(logits) (the decode graph's), used
    // for greedy draws without penalties; may be null. Waits for the stream.
    int32_t sample(const float* logits, const sampling_draw& d, const int32_t* argmax = nullptr);
    // The same without the final wait and copy (benchmarks): the id is left in device memory.
    void enqueue(const float* logits, const sampling_draw& d, const int32_t* argmax = nullptr);
    // Batched decode (memtile serve): row i < b of logits ([b, n_vocab] f32, device) drawn with draws[i], each
    // row exactly as sample() draws it. argmax: [b] device ints holding each row's argmax (the batched step's), or
    // null. One upload of all rows' penalties, one wait; returns the b ids (pinned, valid until the next call).
    const int32_t* sample_rows(const float* logits, const sampling_draw* draws, int b, const int32_t* argmax = nullptr);
    int n_vocab() const { return n_; }

private:
    // Room for n penalty pairs and b output ids (waits for the stream before replacing a buffer).
    void reserve(size_t n_pen, size_t b);
    // One row's steps: pen_ids / pen_counts: [n_pen] device arrays; out: one device int.
    void enqueue_row(const float* logits, const sampling_draw& d, const int32_t* pen_ids, const int32_t* pen_counts,
                     int n_pen, const int32_t* argmax, int32_t* out);

    int n_;
    cudaStream_t stream_;
    float* keys_ = nullptr;          // [n] penalised logits
    float* sorted_keys_ = nullptr;   // [n]
    int32_t* ids_ = nullptr;         // [n] 0..n-1
    int32_t* sorted_ids_ = nullptr;  // [n]
    float* probs_ = nullptr;         // [n]
    void* temp_ = nullptr;
    size_t temp_bytes_ = 0;
    int32_t* pen_dev_ = nullptr;   // [2 * pen_cap_]: ids, then counts
    int32_t* pen_host_ = nullptr;  // pinned mirror
    size_t pen_cap_ = 0;
    int32_t* out_dev_ = nullptr;   // [out_cap_]
    int32_t* out_host_ = nullptr;  // [out_cap_] pinned
    size_t out_cap_ = 0;
};

}  // namespace memtile::cuda
