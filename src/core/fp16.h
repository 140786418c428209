// IEEE half and bfloat16 conversions, bit-exact with the hardware conversions (round to nearest even).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace memtile {

inline float fp16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            uint32_t m = mant;
            do {
                e++;
                m <<= 1;
            } while ((m & 0x400u) == 0);
            bits = sign | uint32_t(127 - 15 - e) << 23 | (m & 0x3ffu) << 13;
        }
    } else if (exp == 0x1f) {  // infinity, or NaN: payload kept, made quiet as F16C's vcvtph2ps does
        bits = sign | 0x7f800000u | mant << 13 | (mant ? 0x400000u : 0u);
    } else {
        bits = sign | (exp + 127 - 15) << 23 | mant << 13;
    }
    return std::bit_cast<float>(bits);
}

inline uint16_t f32_to_fp16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u | (abs & 0x7fffffu) >> 13);  // NaN: quiet, payload top
    if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (rounds to inf) or inf
    if (abs < 0x38800000u) {                                  // subnormal or zero in half
        if (abs < 0x33000000u) return uint16_t(sign);         // below half of the smallest subnormal
        const uint32_t e = abs >> 23;
        const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e;  // 14 + (112 - e) ... places mantissa at half subnormal scale
        const uint32_t shifted = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        uint32_t r = shifted;
        if (rem > half || (rem == half && (shifted & 1u))) r++;
        return uint16_t(sign | r);
    }
    uint32_t r = ((abs >> 13) - (112u << 10));
    const uint32_t rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return uint16_t(sign | r);
}

inline float bf16_to_f32(uint16_t h) {
    return std::bit_cast<float>(uint32_t(h) << 16);
}

inline uint16_t f32_to_bf16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 64u);  // quiet NaN
    return uint16_t((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

}  // namespace memtile
