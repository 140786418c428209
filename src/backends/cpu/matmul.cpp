// Dispatch of matmul to the best instruction-set path (cpu-isa.h), activation quantization into per-thread
// scratch, and the split of output rows across the thread pool.
#include "backends/cpu/matmul.h"

#include <atomic>
#include <vector>

#include "backends/cpu/cpu-isa.h"
#include "backends/cpu/kernels.h"
#include "core/error.h"
#include "core/thread-pool.h"

namespace memtile::cpu {
namespace {

class plain_weight : public prepared_weight {
public:
    explicit plain_weight(const weight_view& w) : w_(w) {}
    const weight_view& view() const override { return w_; }
    uint64_t resident_bytes() const override { return 0; }

private:
    weight_view w_;
};

// Quantized activations of the current call. Owned by the calling thread and only grown, so decode steps
// after the first allocate nothing; workers read it while the caller waits in parallel_for.
struct act_scratch {
    std::vector<int8_t> qs;
    std::vector<float> d;
    std::vector<int16_t> bsums;
};
thread_local act_scratch t_scratch;

std::atomic<bool> g_prefill_gemm{true};

// Rows are handed out in groups of 16 so that, with a 64-byte aligned y and n_out a multiple of 16, two
// threads never write the same cache line of y.
constexpr int64_t k_row_group = 16;

struct gemm_job {
    detail::gemm_fn fn;
    const weight_view* w;
    detail::act_view a;
    int64_t n_tok;
    float* y;
};

struct quantize_job {
    detail::quantize_fn fn;
    const float* x;
    int64_t n_in, block;
    act_scratch* s;
};

}  // namespace

namespace detail {

uint8_t* gemm_scratch(size_t bytes) {
    // 64 bytes of slack so the returned pointer can be aligned inside the vector.
    thread_local std::vector<uint8_t> buf;
    if (buf.size() < bytes + 64) buf.resize(bytes + 64);
    const uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
    return buf.data() + ((64 - p % 64) % 64);
}

}  // namespace detail

std::unique_ptr<prepared_weight> prepare_weight(const weight_view& w, const prepare_options&) {
    const auto& tr = traits(w.type);
    if (w.n_in <= 0 || w.n_in % tr.block_elems != 0)
        fail("cpu", "matmul weight: row length {} is not a multiple of the {} block ({})", w.n_in, tr.name,
             tr.block_elems);
    if (w.row_bytes != row_bytes(w.type, uint64_t(w.n_in)))
        fail("cpu", "matmul weight: row_bytes {} does not match {} x {}", w.row_bytes, w.n_in, tr.name);
    return std::make_unique<plain_weight>(w);
}

void matmul(const prepared_weight& pw, const float* x, int64_t n_tok, float* y, thread_pool& pool) {
    const weight_view& w = pw.view();
    const detail::kernel_set* ks = detail::active_kernels();
    detail::gemm_fn fn = ks ? detail::kernel_for(*ks, w.type) : nullptr;
    // Prefill: the register-blocked GEMM of the same ISA (its results match the kernel_set path bit for
    // bit, so which one a token goes through does not matter); repacked weights keep their own kernels.
    if (fn != nullptr && n_tok >= detail::k_gemm_min_tokens && ks == detail::avx2_kernels() &&
        g_prefill_gemm.load(std::memory_order_relaxed) && dynamic_cast<const plain_weight*>(&pw) != nullptr) {
        const detail::gemm_set* gs = detail::avx2_gemm_kernels();
        if (const detail::gemm_fn g = gs ? detail::gemm_for(*gs, w.type) : nullptr) fn = g;
    }
    if (fn == nullptr) {
        pool.parallel_for(w.n_out, [&](int, int64_t a, int64_t b) { matmul_ref(w, x, n_tok, y, a, b); });
        return;
    }

    gemm_job job{fn, &w, {}, n_tok, y};
    job.a.n_in = w.n_in;
    const detail::act_format af = detail::act_format_for(w.type);
    if (af == detail::act_format::f32) {
        job.a.f32 = x;
    } else {
        const int64_t block = af == detail::act_format::q8_0 ? 32 : 256;
        if (w.n_in % block != 0) fail("cpu", "matmul: row length {} is not a multiple of {}", w.n_in, block);
        act_scratch& s = t_scratch;
        const size_t n = size_t(n_tok * w.n_in);
        if (s.qs.size() < n) s.qs.resize(n);
        if (s.d.size() < n / 32) s.d.resize(n / 32);
        if (s.bsums.size() < n / 16) s.bsums.resize(n / 16);
        quantize_job q{af == detail::act_format::q8_0 ? ks->quantize_q8_0 : ks->quantize_q8_k, x, w.n_in, block, &s};
        const auto quantize_tokens = [&q](int, int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; t++)
                q.fn(q.x + t * q.n_in, q.n_in, q.s->qs.data() + t * q.n_in, q.s->d.data() + t * (q.n_in / q.block),
                     q.s->bsums.data() + t * (q.n_in / 16));
        };
        if (n_tok == 1)
            quantize_tokens(0, 0, 1);
        else
            pool.parallel_for(n_tok, quantize_tokens);
        job.a.qs = s.qs.data();
        job.a.d = s.d.data();
        job.a.bsums = s.bsums.data();
    }

    const int64_t n_groups = (w.n_out + k_row_group - 1) / k_row_group;
    pool.parallel_for(n_groups, [&job](int, int64_t g0, int64_t g1) {
        const int64_t r1 = g1 * k_row_group < job.w->n_out ? g1 * k_row_group : job.w->n_out;
        job.fn(*job.w, job.a, job.n_tok, job.y, job.w->n_out, g0 * k_row_group, r1);
    });
}

void set_prefill_gemm(bool on) {
    g_prefill_gemm.store(on, std::memory_order_relaxed);
}

std::string matmul_path(dtype t) {
    const detail::kernel_set* ks = detail::active_kernels();
    return ks && detail::kernel_for(*ks, t) ? ks->name : "scalar";
}

}  // namespace memtile::cpu
