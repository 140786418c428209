// Switches of the batched decode step (prefill.cpp, cuda_batch_decoder::record), read when a batched decoder captures
// a batch size: knock-outs for measuring where the step's time goes (session 9, gbt9).
#pragma once

namespace memtile::cuda {

// Bits of the batched step's mask (set_batch_step; MEMTILE_CUDA_BATCH_STEP, read at capture, overrides it): knock-outs,
// benchmarks only: the named kernels of every layer are not launched, so the step's results are wrong (the attention
// knock-out also leaves the KV cache unwritten; the output knock-out leaves tokens and positions unchanged, so later
// steps attend over the first position only).
enum batch_step_bits : unsigned {
    k_batch_ko_attn_norm = 1u << 0,  // the attention RMSNorm (+ quantization)
    k_batch_ko_qkv = 1u << 1,        // the Q/K/V product(s)
    k_batch_ko_attention = 1u << 2,  // RoPE + KV write, the attention and its merge (+ quantization)
    k_batch_ko_wo = 1u << 3,         // Wo (+ residual)
    k_batch_ko_ffn_norm = 1u << 4,   // the FFN RMSNorm (+ quantization)
    k_batch_ko_gate_up = 1u << 5,    // the gate/up product(s)
    k_batch_ko_swiglu = 1u << 6,     // SwiGLU (+ quantization)
    k_batch_ko_down = 1u << 7,       // down (+ residual)
    k_batch_ko_output = 1u << 8,     // the output RMSNorm, output product and argmax
    k_batch_ko_all = (1u << 9) - 1,
};
constexpr unsigned k_batch_step_default = 0;
void set_batch_step(unsigned mask);
unsigned batch_step();  // the mask a capture uses now (the environment's, else the setter's)

}  // namespace memtile::cuda
