#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kv/kv-cache.h"

using namespace memtile;

// An f16 cache stores exactly f32_to_fp16 of every value (the vector F16C path and its scalar tail included):
// random bit patterns (NaN payloads, infinities, subnormals, overflow) and ties, rows whose length is and is not a
// multiple of 8.
TEST(kv_cache, f16_store_matches_the_scalar_conversion) {
    std::mt19937 rng(7);
    for (uint32_t kv_dim : {1u, 8u, 13u, 256u}) {
        kv_cache kv(2, 3, kv_dim, dtype::f16);
        for (int rep = 0; rep < 200; rep++) {
            std::vector<float> k(kv_dim), v(kv_dim);
            for (uint32_t i = 0; i < kv_dim; i++) {
                k[i] = std::bit_cast<float>(uint32_t(rng()));
                // Values near half's range, every fourth one a tie between two halves.
                const uint32_t exp = 100 + rng() % 45;
                uint32_t bits = (rng() & 0x80000000u) | exp << 23 | (rng() & 0x7fffffu);
                if (i % 4 == 0) bits = (bits & ~0x1fffu) | 0x1000u;
                v[i] = std::bit_cast<float>(bits);
            }
            const uint32_t layer = uint32_t(rep % 2), pos = uint32_t(rep % 3);
            kv.store(layer, pos, k.data(), v.data());
            std::vector<uint16_t> kh(kv_dim), vh(kv_dim);
            std::memcpy(kh.data(), kv.k_row(layer, pos), kv_dim * 2);
            std::memcpy(vh.data(), kv.v_row(layer, pos), kv_dim * 2);
            for (uint32_t i = 0; i < kv_dim; i++) {
                ASSERT_EQ(kh[i], f32_to_fp16(k[i])) << "k " << std::hex << std::bit_cast<uint32_t>(k[i]);
                ASSERT_EQ(vh[i], f32_to_fp16(v[i])) << "v " << std::hex << std::bit_cast<uint32_t>(v[i]);
            }
        }
    }
}
