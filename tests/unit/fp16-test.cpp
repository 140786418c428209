// core/fp16.h against hardware: half conversions against F16C (all 65536 halves, and floats chosen to hit
// every rounding case); bfloat16 against an independent round-to-nearest-even oracle computed in double,
// since this machine class need not have AVX512-BF16.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/fp16.h"

using namespace memtile;

namespace {

__attribute__((target("f16c"))) float hw_half_to_float(uint16_t h) {
    return _cvtsh_ss(h);
}

__attribute__((target("f16c"))) uint16_t hw_float_to_half(float f) {
    return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

bool have_f16c() {
    return __builtin_cpu_supports("f16c");
}

// Floats that exercise the half conversion: random bit patterns, values around every half exponent
// (normal and subnormal range, ties included), the overflow threshold, infinities and NaN payloads.
std::vector<float> float_cases() {
    std::vector<float> v;
    std::mt19937 rng(42);
    for (int i = 0; i < 200000; ++i) v.push_back(std::bit_cast<float>(uint32_t(rng())));
    for (int i = 0; i < 200000; ++i) {  // exponents near half's range: 2^-30 .. 2^17
        const uint32_t exp = 97 + rng() % 48;
        v.push_back(std::bit_cast<float>(uint32_t((rng() & 0x80000000u) | exp << 23 | (rng() & 0x7fffffu))));
    }
    for (uint32_t h = 0; h < 0x7c00u; ++h) {  // each half, and the ties and neighbours around it
        const uint32_t bits = std::bit_cast<uint32_t>(fp16_to_f32(uint16_t(h)));
        for (const uint32_t b : {bits, bits + 1, bits - 1, bits + 0x1000u, bits + 0xfffu, bits + 0x1001u}) {
            v.push_back(std::bit_cast<float>(b));
            v.push_back(-std::bit_cast<float>(b));
        }
    }
    for (uint32_t k = 0; k < 64; ++k) {  // ties between subnormal halves (and below the smallest)
        const float tie = std::ldexp(float(2 * k + 1), -25);
        v.push_back(tie);
        v.push_back(std::nextafter(tie, 0.0f));
        v.push_back(std::nextafter(tie, 1.0f));
    }
    for (const uint32_t b : {0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477ff001u, 0x7f7fffffu, 0x7f800000u, 0x7f800001u,
                             0x7fc00000u, 0x7fffffffu, 0x7fa00000u, 0x7f802000u, 0x00000001u, 0x33000000u, 0x33000001u,
                             0x387fe000u, 0x387ff000u, 0x38800000u})
        for (const uint32_t sign : {0u, 0x80000000u}) v.push_back(std::bit_cast<float>(b | sign));
    return v;
}

// Round-to-nearest-even of a finite float to bfloat16, via the two neighbouring bfloat16 values in double.
uint16_t bf16_oracle(float f) {
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    if (std::isnan(f)) return 0;  // NaN handled separately
    const uint32_t lo = bits & 0xffff0000u;
    const double a = std::bit_cast<float>(lo);
    const double x = f;
    if (x == a) return uint16_t(lo >> 16);
    // Next bfloat16 away from zero; from the largest finite value that is infinity.
    const uint32_t hi = lo + 0x10000u;
    const double b =
        (hi & 0x7fffffffu) == 0x7f800000u ? std::copysign(std::ldexp(1.0, 128), x) : double(std::bit_cast<float>(hi));
    const double da = std::fabs(x - a), db = std::fabs(b - x);
    if (da < db) return uint16_t(lo >> 16);
    if (db < da) return uint16_t(hi >> 16);
    return ((lo >> 16) & 1u) ? uint16_t(hi >> 16) : uint16_t(lo >> 16);
}

}  // namespace

TEST(fp16, half_to_float_matches_f16c_for_all_halves) {
    if (!have_f16c()) GTEST_SKIP() << "no F16C on this CPU";
    int mismatches = 0;
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const uint32_t got = std::bit_cast<uint32_t>(fp16_to_f32(uint16_t(h)));
        const uint32_t want = std::bit_cast<uint32_t>(hw_half_to_float(uint16_t(h)));
        if (got != want && mismatches++ < 10)
            ADD_FAILURE() << std::hex << "half 0x" << h << ": got 0x" << got << ", F16C 0x" << want;
    }
    EXPECT_EQ(mismatches, 0);
}

TEST(fp16, float_to_half_matches_f16c) {
    if (!have_f16c()) GTEST_SKIP() << "no F16C on this CPU";
    int mismatches = 0;
    const std::vector<float> cases = float_cases();
    for (const float f : cases) {
        const uint16_t got = f32_to_fp16(f);
        const uint16_t want = hw_float_to_half(f);
        if (got != want && mismatches++ < 10)
            ADD_FAILURE() << std::hex << "float 0x" << std::bit_cast<uint32_t>(f) << " (" << f << "): got 0x" << got
                          << ", F16C 0x" << want;
    }
    EXPECT_EQ(mismatches, 0) << "of " << cases.size() << " floats";
}

TEST(fp16, half_round_trip_is_identity_except_nan_quieting) {
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const bool nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
        const uint16_t back = f32_to_fp16(fp16_to_f32(uint16_t(h)));
        EXPECT_EQ(back, nan ? uint16_t(h | 0x200u) : uint16_t(h)) << std::hex << h;
    }
}

TEST(fp16, bfloat16_rounds_to_nearest_even) {
    int mismatches = 0;
    const std::vector<float> cases = float_cases();
    for (const float f : cases) {
        const uint16_t got = f32_to_bf16(f);
        if (std::isnan(f)) {
            // NaN stays NaN, keeps its sign and becomes quiet.
            const bool ok =
                std::isnan(bf16_to_f32(got)) && (got & 0x40u) && (got >> 15) == (std::bit_cast<uint32_t>(f) >> 31);
            if (!ok && mismatches++ < 10)
                ADD_FAILURE() << std::hex << "NaN 0x" << std::bit_cast<uint32_t>(f) << " -> 0x" << got;
            continue;
        }
        const uint16_t want = bf16_oracle(f);
        if (got != want && mismatches++ < 10)
            ADD_FAILURE() << std::hex << "float 0x" << std::bit_cast<uint32_t>(f) << ": got 0x" << got << ", want 0x"
                          << want;
    }
    EXPECT_EQ(mismatches, 0) << "of " << cases.size() << " floats";
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const float f = bf16_to_f32(uint16_t(h));
        EXPECT_EQ(std::bit_cast<uint32_t>(f), h << 16);
        if (!std::isnan(f)) {
            EXPECT_EQ(f32_to_bf16(f), uint16_t(h)) << std::hex << h;
        }
    }
}
