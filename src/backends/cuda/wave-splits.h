// The split count of the one-head decode attention kernels that fits the device's waves of blocks (no CUDA
// dependency, so the CPU-only tests check it).
#pragma once

#include <cstdint>

namespace memtile::cuda {

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
