// Decode matvecs with a fused epilogue (matvec_epilogue: RoPE + KV write, SwiGLU), Q8_0/Q4_0 instantiations, and
// their dispatch. Kernels: matvec-common.cuh; the other families in matvec-kquant-ep.cu and matvec-float-ep.cu (one
// file each, so that nvcc compiles them in parallel).
#include "backends/cuda/matvec-common.cuh"

namespace memtile::cuda {
namespace detail {

bool launch_matvec_legacy_ep(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs,
                             float* y, bool accumulate, matvec_shape shape, const matvec_epilogue& ep, cudaStream_t s) {
    if (w.type == dtype::q8_0) return launch_shaped_ep<dtype::q8_0>(w, x, xq, xd, xs, y, accumulate, shape, ep, s);
    return launch_shaped_ep<dtype::q4_0>(w, x, xq, xd, xs, y, accumulate, shape, ep, s);
}

}  // namespace detail

using namespace detail;

// The block's rows must be even (RoPE pairs) and divide the SwiGLU chunk of 256; launch_shaped_ep instantiates the
// shapes with rows x warps 1x1, 2x1, 2x2, 2x4.
bool matvec_epilogue_supported(const gpu_weight& w, const matvec_epilogue& ep) {
    const matvec_shape sh = default_matvec_shape(w);
    const bool known =
        (sh.rows == 1 && sh.warps == 1) || (sh.rows == 2 && (sh.warps == 1 || sh.warps == 2 || sh.warps == 4));
    if (!known || !matvec_supported(w.type)) return false;
    switch (ep.kind) {
        case matvec_epilogue::none: return true;
        case matvec_epilogue::rope_kv:
            return !ep.rope.neox && ep.rope.head_dim % 2 == 0 && ep.rope.n_rot % 2 == 0 && ep.offset % 2 == 0 &&
                   w.n_out % 2 == 0 && ep.pos && ep.k_cache && ep.v_cache;
        case matvec_epilogue::swiglu:
            return ep.counter && ep.out && ep.n_ff % 256 == 0 && w.n_out == 2 * ep.n_ff &&
                   (!ep.xq || ep.q_block == 32 || ep.q_block == 256);
    }
    return false;
}

bool launch_matvec_ep(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs, float* y,
                      bool accumulate, const matvec_epilogue& ep, cudaStream_t s) {
    if (ep.kind == matvec_epilogue::none) {
        launch_matvec(w, x, xq, xd, xs, y, accumulate, s);
        return true;
    }
    if (!matvec_epilogue_supported(w, ep)) return false;
    const matvec_shape shape = default_matvec_shape(w);
    switch (w.type) {
        case dtype::q8_0:
        case dtype::q4_0: return launch_matvec_legacy_ep(w, x, xq, xd, xs, y, accumulate, shape, ep, s);
        case dtype::q4_k:
        case dtype::q5_k:
        case dtype::q6_k: return launch_matvec_kquant_ep(w, x, xq, xd, xs, y, accumulate, shape, ep, s);
        default: return launch_matvec_float_ep(w, x, xq, xd, xs, y, accumulate, shape, ep, s);
    }
}

}  // namespace memtile::cuda
