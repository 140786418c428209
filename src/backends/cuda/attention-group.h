// The decode attention's choice of query heads per block (attention-decode.cu's attn_group) as plain arithmetic, with
// no CUDA dependency, so that the CPU-only tests check it (tests/unit/cuda-backend-test.cpp).
#pragma once

#include <algorithm>

namespace memtile::cuda {

// The GQA kernels' bound on query heads per block (attention-gqa.cuh's GB) for head_dim 32 nd, nd 1, 2, 4 or 8.
constexpr int attn_group_max(int nd) {
    return nd >= 8 ? 2 : 4;
}

// When the default takes GQA blocks (docs/cuda-log-s18-s31.md, "Session 25", "Session 26" and "Session 28", H100,
// llama3-8b shapes: 8 KV heads of 4 query heads, tg128 at the depth that fills the context). With the key steps of
// forms 0 and 1 they hold 4 times the warps of a one-head block and are issue-bound, so a grid of few of them leaves
// SMs idle: at 9, 13 and 16 splits (72, 104, 128 blocks on 132 SMs) they were 3, 1.8 and 1.1 % slower than one head per
// block; from 17 splits (136 blocks) on 9-18 % faster (one-head blocks no longer fit in one wave there). At 4 splits
// (context 512, few keys, little L2 traffic to save) the batched step at B=8 (256 blocks) was 1.8 % slower. So: at
// least 8 splits and a block per SM. On tensor cores (mma) the blocks are not issue-bound: at 13 splits (104 blocks)
// they were 9 % faster than one head per block, so there at least 8 splits suffice.
inline bool attn_group_pays(int n_blocks, int n_split, bool mma, int sms) {
    return n_split >= 8 && (mma || n_blocks >= sms);
}

struct attn_group_query {
    int n_head, n_head_kv, head_dim, n_split, n_rows;
    int setting;   // set_attention_group's: 0 the default, 1 one head per block, n at most n
    bool aligned;  // caches (and per-sequence slots) 16-byte aligned
    bool mma;      // the tensor-core key steps apply (form 2 set, head_dim 64 or 128)
    int sms;       // the device's SMs
};

// Query heads per block: 1 (the one-head kernels) for MHA, head sizes that are not whole 16-byte pieces or above 256
// (the tiles' rows), unaligned caches, and by default where attn_group_pays does not hold. Otherwise a KV head's query
// heads cut evenly into blocks of at most attn_group_max (or the setting). The tensor-core form is not bit-equal to one
// head per block, so with it the default prices the grid of one sequence whatever n_rows: a sequence's step gives the
// same bits alone and in a batch (the batched and single steps use the same split count).
inline int attn_group_heads(const attn_group_query& q) {
    const int group = q.n_head_kv > 0 ? q.n_head / q.n_head_kv : 1;
    const int nd = (q.head_dim + 31) / 32, ndr = nd <= 1 ? 1 : nd <= 2 ? 2 : nd <= 4 ? 4 : 8;
    if (q.setting == 1 || group < 2 || q.head_dim % 8 != 0 || nd > 8 || !q.aligned) return 1;
    const int cap = q.setting > 0 ? std::min(q.setting, attn_group_max(ndr)) : attn_group_max(ndr);
    const int blocks = (group + cap - 1) / cap;
    const int rows = q.mma ? 1 : q.n_rows;
    if (q.setting == 0 && !attn_group_pays(q.n_head_kv * blocks * q.n_split * rows, q.n_split, q.mma, q.sms)) return 1;
    return (group + blocks - 1) / blocks;
}

}  // namespace memtile::cuda
