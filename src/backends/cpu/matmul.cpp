// Dispatch of matmul to the best instruction-set path (cpu-isa.h), activation quantization into per-thread
// scratch, and the split of output rows across the thread pool.
#include "backends/cpu/matmul.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu-isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/repack.h"
#include "core/error.h"
#include "core/thread-pool.h"

namespace memtile::cpu {
namespace {

class plain_weight : public prepared_weight {
public:
    explicit plain_weight(const weight_view& w) : w_(w) {}
    const weight_view& view() const override { return w_; }
    uint64_t resident_bytes() const override { return 0; }
    std::span<const uint8_t> streamed() const override { return {w_.data, w_.row_bytes * size_t(w_.n_out)}; }

private:
    weight_view w_;
};

struct free_deleter {
    void operator()(uint8_t* p) const { std::free(p); }
};

constexpr size_t k_huge_page = size_t(2) << 20;

// Bytes of a repacked copy: whole groups, rounded to a cache line so that the next copy in an arena starts on one.
size_t packed_size(size_t group_bytes, int64_t n_groups) {
    return (group_bytes * size_t(n_groups) + 63) / 64 * 64;
}

// Returns the whole pages inside [p, p + n) of a file mapping to the OS.
void release_pages(const uint8_t* p, size_t n) {
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    const uintptr_t a = (uintptr_t(p) + page - 1) / page * page, b = (uintptr_t(p) + n) / page * page;
    if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

// The interleaved layout of repack.h, 64-byte aligned, built once at load. The original view stays valid
// (the scalar path and a forced ISA change still read it).
class repacked_weight : public prepared_weight {
public:
    repacked_weight(const weight_view& w, const prepare_options& o)
        : w_(w),
          group_rows_(repack::group_rows(w.type)),
          group_bytes_(repack::group_bytes(w.type, w.n_in)),
          n_groups_((w.n_out + group_rows_ - 1) / group_rows_) {
        const size_t bytes = packed_size(group_bytes_, n_groups_);
        if (o.arena) {
            arena_ = o.arena;
            data_ = arena_->take(bytes);
        } else {
            // Large buffers start on a 2 MiB boundary and ask for transparent huge pages: decode streams them
            // once per token, and 4 KiB pages would cost a TLB miss every 64 cache lines (as --hugepages for
            // the file layout). The tail past the last whole 2 MiB page stays on small pages, so nothing is
            // wasted.
            void* p = nullptr;
            if (posix_memalign(&p, bytes >= k_huge_page ? k_huge_page : 64, bytes) != 0) p = nullptr;
            buf_.reset(static_cast<uint8_t*>(p));
            if (!buf_) fail("cpu", "repack: cannot allocate {} bytes", bytes);
            if (bytes >= k_huge_page) madvise(p, bytes / k_huge_page * k_huge_page, MADV_HUGEPAGE);
            data_ = buf_.get();
        }
        bytes_ = bytes;
        // Groups are independent: the pool packs them in parallel, and each thread's first touch of its part
        // of the new buffer (the page faults, most of the cost on a VM) runs in parallel too. With
        // release_source, each chunk's file pages go back as soon as it is packed, so resident memory does not
        // hold a whole large tensor twice (the tied output of Llama-3.2-1B: 215-525 MB) at any moment.
        const bool release = o.release_source;
        const auto pack = [this, release](int, int64_t g0, int64_t g1) {
            const uint8_t* rows[repack::k_max_rows];
            const int64_t gr = group_rows_;
            for (int64_t g = g0; g < g1; g++) {
                for (int r = 0; r < gr; r++) {
                    const int64_t row = g * gr + r;
                    rows[r] = row < w_.n_out ? w_.data + size_t(row) * w_.row_bytes : nullptr;
                }
                repack::pack_group(w_.type, rows, w_.n_in, data_ + size_t(g) * group_bytes_);
            }
            // Whole pages only: a page shared with the neighbouring chunk stays until the end.
            const int64_t r0 = g0 * gr, r1 = std::min(g1 * gr, w_.n_out);
            if (release) release_pages(w_.data + size_t(r0) * w_.row_bytes, size_t(r1 - r0) * w_.row_bytes);
        };
        // Slices of about 8 MiB of file rows bound what is resident twice; one hand-over per slice is noise.
        const int64_t slice = std::max<int64_t>(1, int64_t((size_t(8) << 20) / (w.row_bytes * size_t(group_rows_))));
        for (int64_t s0 = 0; s0 < n_groups_; s0 += slice) {
            const int64_t n = std::min(slice, n_groups_ - s0);
            if (o.pool && o.pool->size() > 1)
                o.pool->parallel_for(n, [&pack, s0](int t, int64_t a, int64_t b) { pack(t, s0 + a, s0 + b); });
            else
                pack(0, s0, s0 + n);
        }
    }
    const weight_view& view() const override { return w_; }
    uint64_t resident_bytes() const override { return bytes_; }
    std::span<const uint8_t> streamed() const override { return {data_, group_bytes_ * size_t(n_groups_)}; }
    const uint8_t* packed() const { return data_; }
    size_t group_bytes() const { return group_bytes_; }
    int64_t n_groups() const { return n_groups_; }
    int group_rows() const { return group_rows_; }

private:
    weight_view w_;
    int group_rows_;
    size_t group_bytes_;
    int64_t n_groups_;
    std::unique_ptr<uint8_t, free_deleter> buf_;  // the copy when it has no arena
    std::shared_ptr<packed_arena> arena_;         // or the arena that holds it
    uint8_t* data_ = nullptr;
    uint64_t bytes_ = 0;
};

detail::gemv_x8_fn x8_kernel(dtype t) {
    const detail::repack_kernel_set* rk = detail::active_repack_kernels();
    if (!rk) return nullptr;
    switch (t) {
        case dtype::q8_0: return rk->q8_0;
        case dtype::q4_0: return rk->q4_0;
        case dtype::q4_k: return rk->q4_k;
        case dtype::q5_k: return rk->q5_k;
        case dtype::q6_k: return rk->q6_k;
        case dtype::f32: return rk->f32;
        case dtype::f16: return rk->f16;
        case dtype::bf16: return rk->bf16;
        default: return nullptr;
    }
}

detail::gemm_x8_fn x8_gemm_kernel(dtype t) {
    const detail::repack_kernel_set* rk = detail::active_repack_kernels();
    if (!rk) return nullptr;
    switch (t) {
        case dtype::q8_0: return rk->q8_0_gemm;
        case dtype::q4_0: return rk->q4_0_gemm;
        case dtype::q4_k: return rk->q4_k_gemm;
        case dtype::q5_k: return rk->q5_k_gemm;
        case dtype::q6_k: return rk->q6_k_gemm;
        case dtype::f32: return rk->f32_gemm;
        case dtype::f16: return rk->f16_gemm;
        case dtype::bf16: return rk->bf16_gemm;
        default: return nullptr;
    }
}

// Quantized activations of the current call. Owned by the calling thread and only grown, so decode steps
// after the first allocate nothing; workers read it while the caller waits in parallel_for.
// qs and f32 start on a 64-byte boundary, so with n_in a multiple of 32 (8 for f32) no 32-byte load of a token
// row splits a cache line (std::vector's 16-byte alignment split every other one: -10 % for the F16 GEMM,
// -25 % for the per-row F16 kernel).
struct act_scratch {
    std::vector<int8_t> qs_buf;
    std::vector<float> d;
    std::vector<int16_t> bsums;
    std::vector<float> f32_buf;  // aligned copy of f32 activations that are not 32-byte aligned
    int8_t* qs = nullptr;
    float* f32 = nullptr;
};
thread_local act_scratch t_scratch;

std::atomic<bool> g_prefill_gemm{true};
std::atomic<int64_t> g_decode_prefetch{k_default_decode_prefetch};
std::atomic<int> g_decode_streams{0};  // 0: default_decode_streams
std::atomic<int64_t> g_decode_stream_distance{k_default_decode_stream_distance};
std::atomic<int> g_decode_load_width{0};  // 0: default_decode_load_width
std::atomic<int> g_decode_stagger{-1};    // -1: default_decode_stagger, else 0 / 1

bool cpu_is_amd() {
#if defined(__x86_64__)
    static const bool amd = __builtin_cpu_is("amd");
    return amd;
#else
    return false;
#endif
}

bool stagger_decode_streams(dtype t) {
    const int s = g_decode_stagger.load(std::memory_order_relaxed);
    return s < 0 ? default_decode_stagger(t) : s != 0;
}

// Rows are handed out in groups of 16 so that, with a 64-byte aligned y and n_out a multiple of 16, two
// threads never write the same cache line of y.
constexpr int64_t k_row_group = 16;

struct quantize_job {
    detail::quantize_fn fn;
    const float* x;
    int64_t n_in, block;
    act_scratch* s;
};

}  // namespace

namespace detail {

int64_t decode_prefetch_bytes() {
    return g_decode_prefetch.load(std::memory_order_relaxed);
}

decode_stream_setting decode_streams(dtype t) {
    const int n = g_decode_streams.load(std::memory_order_relaxed);
    return {n > 0 ? n : default_decode_streams(t), g_decode_stream_distance.load(std::memory_order_relaxed),
            stagger_decode_streams(t)};
}

bool decode_narrow_loads(dtype t) {
    return decode_load_width(t) == 256;
}

uint8_t* gemm_scratch(size_t bytes) {
    // 64 bytes of slack so the returned pointer can be aligned inside the vector.
    thread_local std::vector<uint8_t> buf;
    if (buf.size() < bytes + 64) buf.resize(bytes + 64);
    const uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
    return buf.data() + ((64 - p % 64) % 64);
}

}  // namespace detail

packed_arena::packed_arena(size_t bytes) : capacity_((bytes + 63) / 64 * 64) {
    if (capacity_ == 0) return;
    // 2 MiB of slack to start on a huge-page boundary; only whole huge pages ask for THP (the tail stays on small
    // pages, as for a buffer of its own).
    const size_t align = capacity_ >= k_huge_page ? k_huge_page : 64;
    map_bytes_ = capacity_ + align;
    void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("cpu", "repack: cannot reserve {} bytes for the packed weights", map_bytes_);
    map_ = static_cast<uint8_t*>(p);
    base_ = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(map_) + align - 1) / align * align);
    if (capacity_ >= k_huge_page) madvise(base_, capacity_ / k_huge_page * k_huge_page, MADV_HUGEPAGE);
}

packed_arena::~packed_arena() {
    if (map_) munmap(map_, map_bytes_);
}

uint8_t* packed_arena::take(size_t bytes) {
    if (bytes % 64 != 0 || bytes > capacity_ - used_)
        fail("cpu", "repack arena: {} bytes asked, {} of {} left (multiples of 64 expected)", bytes, capacity_ - used_,
             capacity_);
    uint8_t* p = base_ + used_;
    used_ += bytes;
    return p;
}

size_t packed_bytes(const weight_view& w, const prepare_options& o) {
    const auto& tr = traits(w.type);
    if (!o.repack || !repack::supported(w.type) || !x8_kernel(w.type) || w.n_in <= 0 || w.n_in % tr.block_elems != 0 ||
        w.n_out <= 0)
        return 0;
    const int64_t rows = repack::group_rows(w.type);
    return packed_size(repack::group_bytes(w.type, w.n_in), (w.n_out + rows - 1) / rows);
}

std::unique_ptr<prepared_weight> prepare_weight(const weight_view& w, const prepare_options& o) {
    const auto& tr = traits(w.type);
    if (w.n_in <= 0 || w.n_in % tr.block_elems != 0)
        fail("cpu", "matmul weight: row length {} is not a multiple of the {} block ({})", w.n_in, tr.name,
             tr.block_elems);
    if (w.row_bytes != row_bytes(w.type, uint64_t(w.n_in)))
        fail("cpu", "matmul weight: row_bytes {} does not match {} x {}", w.row_bytes, w.n_in, tr.name);
    if (o.repack && repack::supported(w.type) && x8_kernel(w.type)) {
        auto r = std::make_unique<repacked_weight>(w, o);
        if (o.release_source) release_pages(w.data, size_t(w.n_out) * w.row_bytes);
        return r;
    }
    return std::make_unique<plain_weight>(w);
}

namespace {

// Grows v to hold n elements after a 64-byte aligned start and returns that start (the vector only grows, so
// decode steps after the first allocate nothing).
template <class T>
T* aligned_grow(std::vector<T>& v, size_t n) {
    const size_t slack = 64 / sizeof(T);
    if (v.size() < n + slack) v.resize(n + slack);
    const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
    return v.data() + (64 - p % 64) % 64 / sizeof(T);
}

// Quantizes the n_tok tokens of x into the calling thread's scratch in the format the kernels of w read.
detail::act_view quantize_activations(const detail::kernel_set& ks, const weight_view& w, const float* x, int64_t n_tok,
                                      thread_pool& pool) {
    detail::act_view a;
    a.n_in = w.n_in;
    const detail::act_format af = detail::act_format_for(w.type);
    act_scratch& s = t_scratch;
    if (af == detail::act_format::f32) {
        a.f32 = x;
        if (reinterpret_cast<uintptr_t>(x) % 32 == 0) return a;
        const size_t n = size_t(n_tok * w.n_in);
        s.f32 = aligned_grow(s.f32_buf, n);
        float* dst = s.f32;
        const int64_t n_in = w.n_in;
        const auto copy_tokens = [x, dst, n_in](int, int64_t t0, int64_t t1) {
            std::memcpy(dst + t0 * n_in, x + t0 * n_in, size_t((t1 - t0) * n_in) * sizeof(float));
        };
        if (n_tok == 1)
            copy_tokens(0, 0, 1);
        else
            pool.parallel_for(n_tok, copy_tokens);
        a.f32 = dst;
        return a;
    }
    const int64_t block = af == detail::act_format::q8_0 ? 32 : 256;
    if (w.n_in % block != 0) fail("cpu", "matmul: row length {} is not a multiple of {}", w.n_in, block);
    const size_t n = size_t(n_tok * w.n_in);
    s.qs = aligned_grow(s.qs_buf, n);
    if (s.d.size() < n / 32) s.d.resize(n / 32);
    if (s.bsums.size() < n / 16) s.bsums.resize(n / 16);
    quantize_job q{af == detail::act_format::q8_0 ? ks.quantize_q8_0 : ks.quantize_q8_k, x, w.n_in, block, &s};
    const auto quantize_tokens = [&q](int, int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; t++)
            q.fn(q.x + t * q.n_in, q.n_in, q.s->qs + t * q.n_in, q.s->d.data() + t * (q.n_in / q.block),
                 q.s->bsums.data() + t * (q.n_in / 16));
    };
    if (n_tok == 1)
        quantize_tokens(0, 0, 1);
    else
        pool.parallel_for(n_tok, quantize_tokens);
    a.qs = s.qs;
    a.d = s.d.data();
    a.bsums = s.bsums.data();
    return a;
}

// One matrix of a matmul_multi call: its rows in units of unit_rows (k_row_group: 16 rows, two 8-row groups of
// the x8 layout; a whole 32-row group of the float layouts), numbered from `first` in the call's common unit
// space.
struct part {
    const weight_view* w = nullptr;
    const repacked_weight* rw = nullptr;
    detail::gemv_x8_fn x8 = nullptr;       // set: the interleaved layout, else fn on the original rows
    detail::gemm_x8_fn x8_gemm = nullptr;  // prefill on the interleaved layout (nullptr: x8 token by token)
    detail::gemm_fn fn = nullptr;
    float* y = nullptr;
    int64_t first = 0, n_units = 0, unit_rows = k_row_group;
};

// Units [u0, u1) of one matrix. Prefill on the x8 layout runs token blocks of about k_x8_token_bytes of
// activations (kept in L2) over the groups, several tokens per pass over a group (x8_gemm); without it
// (the A/B switch set_prefill_gemm(false)) groups of about k_row_block_bytes pass every token, one at a time.
constexpr int64_t k_x8_token_bytes = int64_t(256) << 10;

void run_units(const part& p, const detail::act_view& a, int64_t n_tok, int64_t u0, int64_t u1) {
    const int64_t n_out = p.w->n_out;
    if (!p.x8) {
        p.fn(*p.w, a, n_tok, p.y, n_out, u0 * p.unit_rows, std::min(n_out, u1 * p.unit_rows));
        return;
    }
    const repacked_weight& rw = *p.rw;
    const int64_t per_unit = p.unit_rows / rw.group_rows();
    const int64_t g0 = per_unit * u0, g1 = std::min(rw.n_groups(), per_unit * u1);
    if (n_tok == 1) {
        p.x8(rw.packed(), rw.group_bytes(), a, 0, p.y, n_out, g0, g1);
        return;
    }
    if (p.x8_gemm) {
        // The float layouts' kernels block their f32 tokens themselves.
        const bool f32_act = detail::act_format_for(p.w->type) == detail::act_format::f32;
        const int64_t tb = f32_act ? n_tok : std::max<int64_t>(4, k_x8_token_bytes / p.w->n_in / 4 * 4);
        for (int64_t t = 0; t < n_tok; t += tb)
            p.x8_gemm(rw.packed(), rw.group_bytes(), a, t, std::min(n_tok, t + tb), p.y, n_out, g0, g1);
        return;
    }
    const int64_t block = std::max<int64_t>(1, int64_t(detail::k_row_block_bytes / rw.group_bytes()));
    for (int64_t gb = g0; gb < g1; gb += block)
        for (int64_t t = 0; t < n_tok; t++)
            p.x8(rw.packed(), rw.group_bytes(), a, t, p.y, n_out, gb, std::min(g1, gb + block));
}

}  // namespace

void matmul(const prepared_weight& pw, const float* x, int64_t n_tok, float* y, thread_pool& pool) {
    const prepared_weight* w[1] = {&pw};
    float* out[1] = {y};
    matmul_multi(w, x, n_tok, out, pool);
}

void matmul_multi(std::span<const prepared_weight* const> ws, const float* x, int64_t n_tok, std::span<float* const> ys,
                  thread_pool& pool) {
    constexpr size_t k_max_parts = 4;
    if (ws.size() != ys.size() || ws.empty() || ws.size() > k_max_parts)
        fail("cpu", "matmul_multi: {} weights and {} outputs (1 to {} expected)", ws.size(), ys.size(), k_max_parts);
    const detail::kernel_set* ks = detail::active_kernels();
    const weight_view& w0 = ws[0]->view();
    bool shared = ks != nullptr;
    for (const prepared_weight* pw : ws) {
        const weight_view& w = pw->view();
        if (w.n_in != w0.n_in) fail("cpu", "matmul_multi: row lengths {} and {} differ", w0.n_in, w.n_in);
        shared = shared && detail::kernel_for(*ks, w.type) &&
                 detail::act_format_for(w.type) == detail::act_format_for(w0.type);
    }
    if (!shared) {
        // Formats without a kernel, or with activations in different formats: one call each.
        for (size_t i = 0; i < ws.size(); i++) {
            const weight_view& w = ws[i]->view();
            const detail::gemm_fn fn = ks ? detail::kernel_for(*ks, w.type) : nullptr;
            if (fn == nullptr) {
                float* y = ys[i];
                pool.parallel_for(w.n_out, [&](int, int64_t a, int64_t b) { matmul_ref(w, x, n_tok, y, a, b); });
            } else {
                matmul_multi(ws.subspan(i, 1), x, n_tok, ys.subspan(i, 1), pool);
            }
        }
        return;
    }
    detail::act_view a = quantize_activations(*ks, w0, x, n_tok, pool);
    part parts[k_max_parts];
    int64_t total = 0;
    for (size_t i = 0; i < ws.size(); i++) {
        part& p = parts[i];
        p.w = &ws[i]->view();
        p.fn = detail::kernel_for(*ks, p.w->type);
        p.rw = dynamic_cast<const repacked_weight*>(ws[i]);
        p.x8 = p.rw ? x8_kernel(p.w->type) : nullptr;
        if (p.x8 && n_tok >= detail::k_gemm_min_tokens && g_prefill_gemm.load(std::memory_order_relaxed))
            p.x8_gemm = x8_gemm_kernel(p.w->type);
        // Prefill on the original layout: the register-blocked GEMM of the same ISA (its results match the
        // kernel_set path bit for bit, so which one a token goes through does not matter).
        if (!p.x8 && n_tok >= detail::k_gemm_min_tokens && ks == detail::avx2_kernels() &&
            g_prefill_gemm.load(std::memory_order_relaxed)) {
            const detail::gemm_set* gs = detail::avx2_gemm_kernels();
            if (const detail::gemm_fn g = gs ? detail::gemm_for(*gs, p.w->type) : nullptr) p.fn = g;
        }
        p.y = ys[i];
        p.first = total;
        if (p.x8) p.unit_rows = std::max<int64_t>(k_row_group, p.rw->group_rows());
        p.n_units = (p.w->n_out + p.unit_rows - 1) / p.unit_rows;
        total += p.n_units;
    }
    const size_t n_parts = ws.size();
    const auto job = [&](int, int64_t u0, int64_t u1) {
        for (size_t i = 0; i < n_parts; i++) {
            const part& p = parts[i];
            const int64_t b = std::max(u0, p.first), e = std::min(u1, p.first + p.n_units);
            if (b < e) run_units(p, a, n_tok, b - p.first, e - p.first);
        }
    };
    // Decode takes the pool's hand-out (halving by default: few restarts of the weight streams); prefill equal
    // ranges, which measured 5-10 % faster than halving there (TinyLlama Q4_K_M pp64 / pp512, session 16).
    if (n_tok == 1)
        pool.parallel_for(total, job);
    else
        pool.parallel_for(total, job, thread_pool::split::ranges, thread_pool::k_default_range_chunks);
}

void set_decode_prefetch(int64_t bytes) {
    g_decode_prefetch.store(bytes > 0 ? bytes : 0, std::memory_order_relaxed);
}

void set_decode_streams(int count, int64_t min_distance) {
    if (count < 0 || count > 4 || count == 3)
        fail("cpu", "decode streams must be 0 (per-format default), 1, 2 or 4, not {}", count);
    g_decode_streams.store(count, std::memory_order_relaxed);
    g_decode_stream_distance.store(min_distance > 0 ? min_distance : 0, std::memory_order_relaxed);
}

void set_decode_stream_stagger(std::optional<bool> on) {
    g_decode_stagger.store(on ? int(*on) : -1, std::memory_order_relaxed);
}

bool default_decode_stagger(dtype t) {
    return t == dtype::q4_k || t == dtype::q5_k || t == dtype::q6_k || (t == dtype::q8_0 && !cpu_is_amd());
}

void set_decode_load_width(int bits) {
    if (bits != 0 && bits != 256 && bits != 512)
        fail("cpu", "decode load width must be 0 (each format's default), 256 or 512, not {}", bits);
    g_decode_load_width.store(bits, std::memory_order_relaxed);
}

int default_decode_load_width(dtype t) {
    return t == dtype::q8_0 || (cpu_is_amd() && t != dtype::q5_k) ? 256 : 512;
}

int decode_load_width(dtype t) {
    const int w = g_decode_load_width.load(std::memory_order_relaxed);
    return w ? w : default_decode_load_width(t);
}

int default_decode_streams(dtype t) {
    // Four for the x8 layouts (session 14, AVX2 VM whose one core read 17-20 GB/s with one stream; in-process A/B
    // of 2 against 4 streams, medians: 1 thread +4-25 % tok/s on Q8_0 / Q4_K / Q6_K, Q5_K within the spread; 2
    // threads -2 to +12 %; docs/cpu.md). Q4_0 follows Q8_0 (not measured). The float x32 layouts take two. The
    // AVX-512 Q6_K kernel takes two (session 16, Zen 5, in-process A/B: two streams +4-9 % at 2 threads in four of
    // four pairs, +9 % at 1 thread). Session 21 made that AMD's only and added Q4_K and Q5_K (in-process A/B of whole
    // models, tg48 medians, TinyLlama shapes; docs/cpu.md): on Zen 4, after session 20's staggered runs and 256-bit
    // loads, two streams gave Q4_K_M +4.1-5.6 % and Q5_K_S +3.2-6.0 % at 1 thread (2 threads within that VM's
    // phases); on the device host's Intel Xeon (AVX-512) four gave Q6_K +19-20 % and Q4_K_M / Q5_K_S +8-14 % at 1 and
    // 4 threads. Session 41 gave the AVX-512 Q8_0 decode two streams except on AMD: on that Intel Xeon (AVX-512 +
    // AMX, 2 vCPUs) its 256-bit kernel (the default load width for Q8_0) with two streams against four, in-process,
    // tg32 medians of 5 rounds: 1 thread TinyLlama Q8_0 14.70 / 14.04 tok/s, Llama-3.2-1B 12.63 / 11.83; 2 threads
    // 28.67 / 26.78 and 23.68 / 22.83; the 512-bit kernel was level with itself at two and four (13.97 / 14.00,
    // 11.84 / 11.87), and no other pair reached the 256-bit kernel at two.
    switch (t) {
        case dtype::q4_k:
        case dtype::q5_k:
        case dtype::q6_k: return is_avx512(active_isa()) && cpu_is_amd() ? 2 : 4;
        case dtype::q8_0: return is_avx512(active_isa()) && !cpu_is_amd() ? 2 : 4;
        case dtype::q4_0: return 4;
        default: return 2;
    }
}

void set_prefill_gemm(bool on) {
    g_prefill_gemm.store(on, std::memory_order_relaxed);
}

std::string matmul_path(dtype t) {
    const detail::kernel_set* ks = detail::active_kernels();
    return ks && detail::kernel_for(*ks, t) ? ks->name : "scalar";
}

}  // namespace memtile::cpu
