// Prefill GEMM for the integer formats (driver and design in gemm-avx2.h) and the AVX2 GEMM table.
//
// Q8_0 / Q4_0 (legacy_panel): a panel block holds, per row, the 32 signed levels, their absolute values and
// the f32 scale. Per 32-element block and (row, token): maddubs(|w|, sign(q, w)), madd with ones, convert,
// FMA with d_w * d_q into the accumulator of that block's residue mod 4, as legacy_kernel does; R x T =
// 4 x 2 accumulators stay in registers for one accumulator pass over a K slice.
//
// Q4_K / Q5_K / Q6_K (k_panel): one common unpacked form for all three. Per 256-element super-block and row:
// the 256 unsigned levels (0..15, 0..31, 0..63) in element order, 8 chunks of 32 interleaved across the R
// rows; per chunk and row a vector of 16 int16 scales, the scale of its first 16 elements in the low half
// and of the last 16 in the high half (equal for Q4_K and Q5_K, whose sub-blocks are 32 long); 16 int16 for the min /
// offset term (Q4_K/Q5_K: each min twice, Q6_K: the 16 scales); d (and dmin) as f32. Per chunk the micro-kernel loads T
// token vectors and, per row, the levels, then maddubs + madd + add into R x T = 4 x 2 int32 accumulators, which equal
// (lane for lane) the per-row kernels' super-block sums; the float epilogue per super-block is theirs operation for
// operation.
#include "backends/cpu/avx2/gemm-avx2.h"

namespace memtile::cpu::avx2 {
namespace {

constexpr int k_block = 32, k_super = 256;

// Token block for integer activations (1 byte per element): about 256 KiB of them, 16..256 tokens.
int64_t int8_token_block(int64_t n_in) {
    const int64_t b = (int64_t(256) << 10) / n_in;
    return b < 16 ? 16 : b > 256 ? 256 : b;
}

template <class W>
struct legacy_panel {
    static constexpr int R = 4, T = 2, n_acc = 4;
    static_assert(T == 2, "the blend below builds the scale lanes of 2 tokens");
    static constexpr int64_t slice = 32;  // 32 blocks x 4 rows x 68 bytes = 9 KiB of panel in L1
    // levels [R][32], |levels| [R][32], d [R x T] f32 (each row's scale once per token of a tile)
    static constexpr int64_t stride = R * 64 + R * T * 4;
    static_assert(R * T == 8, "the scale products of a tile fill one vector");
    static int64_t units(int64_t n_in) { return n_in / k_block; }
    static int64_t token_block(int64_t n_in) { return int8_token_block(n_in); }
    static size_t panel_bytes(int64_t n_in) { return size_t(units(n_in) * stride); }

    static void pack(const weight_view& w, int64_t row0, int n_rows, uint8_t* panel) {
        const int64_t nb = units(w.n_in);
        for (int r = 0; r < R; r++) {
            const uint8_t* row = w.data + size_t(row0 + (r < n_rows ? r : 0)) * w.row_bytes;
            for (int64_t ib = 0; ib < nb; ib++) {
                uint8_t* base = panel + ib * stride;
                const uint8_t* b = row + ib * W::bytes;
                const __m256i lv = r < n_rows ? W::levels(b) : _mm256_setzero_si256();
                _mm256_store_si256(reinterpret_cast<__m256i*>(base + r * 32), lv);
                _mm256_store_si256(reinterpret_cast<__m256i*>(base + (R + r) * 32), _mm256_abs_epi8(lv));
                for (int j = 0; j < T; j++)
                    reinterpret_cast<float*>(base + 2 * R * 32)[r * T + j] = r < n_rows ? load_f16(b) : 0.0f;
            }
        }
    }

    static void run(const uint8_t* panel, const act_view& a, int64_t n_in, const int64_t* tok, int64_t u0, int64_t u1,
                    int64_t step, __m256* acc_mem) {
        const int64_t nb = n_in / k_block;
        const int8_t* q[T];
        const float* d[T];
        for (int j = 0; j < T; j++) {
            q[j] = a.qs + tok[j] * n_in;
            d[j] = a.d + tok[j] * nb;
        }
        __m256 acc[R][T];
        for (int r = 0; r < R; r++)
            for (int j = 0; j < T; j++) acc[r][j] = acc_mem[r * T + j];
        const __m256i ones = _mm256_set1_epi16(1);
        // The 8 scale products d_w[r] * d_q[j] of a block in one vector multiply (lane r * T + j), stored and
        // broadcast back by loads, which use no ALU pipe: the same IEEE products as the per-row kernel's.
        alignas(32) float prod[R * T];
        for (int64_t ib = u0; ib < u1; ib += step) {
            const uint8_t* base = panel + ib * stride;
            const __m256 dq = _mm256_blend_ps(_mm256_broadcast_ss(d[0] + ib), _mm256_broadcast_ss(d[1] + ib), 0xaa);
            _mm256_store_ps(prod, _mm256_mul_ps(_mm256_load_ps(reinterpret_cast<const float*>(base + 2 * R * 32)), dq));
            __m256i av[T];
            for (int j = 0; j < T; j++) av[j] = loadu(q[j] + ib * k_block);
            for (int r = 0; r < R; r++) {
                const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(base + r * 32));
                const __m256i aw = _mm256_load_si256(reinterpret_cast<const __m256i*>(base + (R + r) * 32));
                for (int j = 0; j < T; j++) {
                    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(av[j], w)), ones);
                    acc[r][j] =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(prod + r * T + j), acc[r][j]);
                }
            }
        }
        for (int r = 0; r < R; r++)
            for (int j = 0; j < T; j++) acc_mem[r * T + j] = acc[r][j];
    }

    static float tail(const weight_view&, int64_t, const act_view&, int64_t, float s) { return s; }
};

enum class kfmt { q4_k, q5_k, q6_k };

template <kfmt F>
struct k_panel {
    static constexpr int R = 4, T = 2, n_acc = 1;
    // 4 super-blocks x 2208 bytes = 8.6 KiB of panel per slice, in L1 while the token tiles pass.
    static constexpr int64_t slice = 4;
    // levels [8][R][32], scale vectors [8][R][16 x int16], min/offset int16 [R][16], d [R] and dmin [R] f32.
    // The scale vectors are stored whole so that the micro-kernel's madd takes them straight from memory.
    static constexpr int64_t levels_off = 0, scales_off = 8 * R * 32, epi_off = scales_off + 8 * R * 32,
                             d_off = epi_off + R * 32, stride = d_off + 2 * R * 4;
    static constexpr int src_bytes = F == kfmt::q4_k ? 144 : F == kfmt::q5_k ? 176 : 210;
    static int64_t units(int64_t n_in) { return n_in / k_super; }
    static int64_t token_block(int64_t n_in) { return int8_token_block(n_in); }
    static size_t panel_bytes(int64_t n_in) { return size_t(units(n_in) * stride); }

    static void store(uint8_t* p, __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }

    // Unpacks super-block b of one row into slot r of the panel block at base.
    static void pack_block(const uint8_t* b, int r, uint8_t* base) {
        uint32_t sc_dw[8];
        float* dd = reinterpret_cast<float*>(base + d_off);
        if constexpr (F == kfmt::q6_k) {
            const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
            for (int h = 0; h < 2; h++) {
                const __m256i ql0 = loadu(b + 64 * h), ql1 = loadu(b + 64 * h + 32), qh = loadu(b + 128 + 32 * h);
                const __m256i run[4] = {
                    _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
                    _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
                };
                for (int k = 0; k < 4; k++) store(base + levels_off + ((4 * h + k) * R + r) * 32, run[k]);
            }
            const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
            for (int c = 0; c < 8; c++)
                sc_dw[c] = uint32_t(uint16_t(int16_t(sc[2 * c]))) | uint32_t(uint16_t(int16_t(sc[2 * c + 1]))) << 16;
            store(base + epi_off + r * 32, _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc))));
            dd[r] = load_f16(b + 208);
            dd[R + r] = 0.0f;
        } else {
            constexpr bool high_bit = F == kfmt::q5_k;
            using kq = simd256::q45_k_kernel<high_bit, int8_ops>;
            const __m128 dmin2 = simd256::load_two_f16(b);
            alignas(32) int16_t sm[16];
            _mm256_store_si256(reinterpret_cast<__m256i*>(sm), simd256::unpack_scales_mins(b + 4));
            const __m256i m4 = _mm256_set1_epi8(0x0f);
            const __m256i qh = high_bit ? loadu(b + 16) : _mm256_setzero_si256();
            for (int c = 0; c < 4; c++) {
                const __m256i raw = loadu(b + kq::qs_offset + 32 * c);
                __m256i lo = _mm256_and_si256(raw, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                if (high_bit) {
                    lo = _mm256_or_si256(lo, kq::high_bits(qh, 2 * c));
                    hi = _mm256_or_si256(hi, kq::high_bits(qh, 2 * c + 1));
                }
                store(base + levels_off + ((2 * c) * R + r) * 32, lo);
                store(base + levels_off + ((2 * c + 1) * R + r) * 32, hi);
            }
            int16_t* mins2 = reinterpret_cast<int16_t*>(base + epi_off + r * 32);
            for (int c = 0; c < 8; c++) {
                sc_dw[c] = uint32_t(uint16_t(sm[c])) * 0x10001u;
                mins2[2 * c] = mins2[2 * c + 1] = sm[8 + c];
            }
            alignas(16) float two[4];
            _mm_store_ps(two, dmin2);
            dd[r] = two[0];
            dd[R + r] = two[1];
        }
        // Per chunk: the scale of its first 16 elements in the low 128-bit half, of the last 16 in the high.
        const __m256i pair_mask = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,  //
                                                   2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
        for (int c = 0; c < 8; c++)
            store(base + scales_off + (c * R + r) * 32,
                  _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(sc_dw[c])), pair_mask));
    }

    static void pack(const weight_view& w, int64_t row0, int n_rows, uint8_t* panel) {
        const int64_t nb = units(w.n_in);
        for (int64_t ib = 0; ib < nb; ib++) {
            uint8_t* base = panel + ib * stride;
            for (int r = 0; r < R; r++) {
                if (r < n_rows) {
                    pack_block(w.data + size_t(row0 + r) * w.row_bytes + ib * src_bytes, r, base);
                    continue;
                }
                for (int c = 0; c < 8; c++) {
                    store(base + levels_off + (c * R + r) * 32, _mm256_setzero_si256());
                    store(base + scales_off + (c * R + r) * 32, _mm256_setzero_si256());
                }
                store(base + epi_off + r * 32, _mm256_setzero_si256());
                reinterpret_cast<float*>(base + d_off)[r] = 0.0f;
                reinterpret_cast<float*>(base + d_off)[R + r] = 0.0f;
            }
        }
    }

    static void run(const uint8_t* panel, const act_view& a, int64_t n_in, const int64_t* tok, int64_t u0, int64_t u1,
                    int64_t step, __m256* acc_mem) {
        const int64_t nb = n_in / k_super;
        const int8_t* q[T];
        const float* d[T];
        const int16_t* bs[T];
        for (int j = 0; j < T; j++) {
            q[j] = a.qs + tok[j] * n_in;
            d[j] = a.d + tok[j] * nb;
            bs[j] = a.bsums + tok[j] * (n_in / 16);
        }
        for (int64_t ib = u0; ib < u1; ib += step) {
            const uint8_t* base = panel + ib * stride;
            __m256i isum[R][T];
            for (int r = 0; r < R; r++)
                for (int j = 0; j < T; j++) isum[r][j] = _mm256_setzero_si256();
            for (int c = 0; c < 8; c++) {
                __m256i av[T];
                for (int j = 0; j < T; j++) av[j] = loadu(q[j] + ib * k_super + 32 * c);
                for (int r = 0; r < R; r++) {
                    const __m256i w =
                        _mm256_load_si256(reinterpret_cast<const __m256i*>(base + levels_off + (c * R + r) * 32));
                    const __m256i s =
                        _mm256_load_si256(reinterpret_cast<const __m256i*>(base + scales_off + (c * R + r) * 32));
                    for (int j = 0; j < T; j++)
                        isum[r][j] = _mm256_add_epi32(isum[r][j], _mm256_madd_epi16(_mm256_maddubs_epi16(w, av[j]), s));
                }
            }
            // Scale products as one vector multiply of two broadcast loads (the same IEEE product as the
            // per-row kernels' scalar one) rather than a scalar multiply and a register broadcast.
            const float* dd = reinterpret_cast<const float*>(base + d_off);
            __m256 dq[T];
            for (int j = 0; j < T; j++) dq[j] = _mm256_broadcast_ss(d[j] + ib);
            for (int r = 0; r < R; r++) {
                const __m256i epi = _mm256_load_si256(reinterpret_cast<const __m256i*>(base + epi_off + r * 32));
                const __m256 dr = _mm256_broadcast_ss(dd + r);
                for (int j = 0; j < T; j++) {
                    const __m256i bsum = loadu(bs[j] + ib * 16);
                    __m256 acc = acc_mem[r * T + j];
                    if constexpr (F == kfmt::q6_k) {
                        // Levels are stored + 32: subtract 32 * sum_s scale[s] * bsum[s].
                        const __m256i off = _mm256_madd_epi16(epi, bsum);
                        const __m256i net = _mm256_sub_epi32(isum[r][j], _mm256_slli_epi32(off, 5));
                        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(net), _mm256_mul_ps(dr, dq[j]), acc);
                    } else {
                        const __m256i msum = _mm256_madd_epi16(bsum, epi);
                        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][j]), _mm256_mul_ps(dr, dq[j]), acc);
                        acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum),
                                               _mm256_mul_ps(_mm256_broadcast_ss(dd + R + r), dq[j]), acc);
                    }
                    acc_mem[r * T + j] = acc;
                }
            }
        }
    }

    static float tail(const weight_view&, int64_t, const act_view&, int64_t, float s) { return s; }
};

}  // namespace

void gemm_panel_q8_0(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0,
                     int64_t r1) {
    gemm_panels<legacy_panel<simd256::q8_0_weights>>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_panel_q4_0(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0,
                     int64_t r1) {
    gemm_panels<legacy_panel<simd256::q4_0_weights>>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_panel_q4_k(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0,
                     int64_t r1) {
    gemm_panels<k_panel<kfmt::q4_k>>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_panel_q5_k(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0,
                     int64_t r1) {
    gemm_panels<k_panel<kfmt::q5_k>>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_panel_q6_k(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0,
                     int64_t r1) {
    gemm_panels<k_panel<kfmt::q6_k>>(w, a, n_tok, y, ys, r0, r1);
}

const detail::gemm_set k_avx2_gemm_set = {
    gemm_panel_f32,  gemm_panel_f16,  gemm_panel_bf16, gemm_panel_q8_0,
    gemm_panel_q4_0, gemm_panel_q4_k, gemm_panel_q5_k, gemm_panel_q6_k,
};

}  // namespace memtile::cpu::avx2

namespace memtile::cpu::detail {

const gemm_set* avx2_gemm_kernels() {
    return &avx2::k_avx2_gemm_set;
}

}  // namespace memtile::cpu::detail
