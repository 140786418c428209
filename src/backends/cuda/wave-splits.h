// The split arithmetic of the decode attention: the split count of the one-head kernels that fits the device's waves
// of blocks, and the keys of each split (no CUDA dependency, so the CPU-only tests check both).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MEMTILE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MEMTILE_HOST_DEVICE inline
#endif

namespace memtile::cuda {

// The keys of each split of the split-K decode attention (split s: keys [s chunk, (s + 1) chunk) of n_keys):
// ceil(n_keys / n_split), but at least min_keys, so that a short context fills only the first ceil(n_keys / chunk)
// splits of a grid sized for the whole context (the rest hold no key: the merges skip their states). Every attention
// kernel of the single and the batched step cuts its keys here, from the row's own position: a batch of one keeps the
// single step's bits, and a row's do not depend on its batch-mates.
MEMTILE_HOST_DEVICE int attn_split_chunk(int n_keys, int n_split, int min_keys) {
    const int c = (n_keys + n_split - 1) / n_split;
    return c > min_keys ? c : min_keys;
}

// s in 1..n_split whose grid of n_head x s blocks, `wave` blocks resident at once, takes the least time per key: s
// splits cost ceil(n_head s / wave) waves of n_keys / s keys each, so a partial last wave costs a whole one (32 heads,
// 528 blocks a wave: 17 splits need 2 waves of 1/17 of the keys, 16 one wave of 1/16). The largest s of equal cost;
// n_split itself where the grid fits one wave or wave <= 0 (unknown).
inline int fewest_wave_splits(int n_head, int n_split, int64_t wave) {
    if (n_split <= 1 || n_head <= 0 || wave <= 0 || int64_t(n_head) * n_split <= wave) return n_split;
    int best = n_split;
    int64_t best_waves = (int64_t(n_head) * n_split + wave - 1) / wave;
    for (int s = n_split - 1; s >= 1; s--) {
        // waves(s) / s < best_waves / best, in integers.
        const int64_t waves = (int64_t(n_head) * s + wave - 1) / wave;
        if (waves * best < best_waves * s) best = s, best_waves = waves;
    }
    return best;
}

}  // namespace memtile::cuda
