// Software prefetch of a contiguous run of bytes spread over a loop that precedes their use (the decode attention
// loops of avx2/ and avx512/): start() names the run, each step(per) issues its next `per` cache lines, into L2
// (prefetcht1: on Zen 4 the AVX-512 decode attention at depth 4,096 took 11.9 ms per token against 17.6 with
// prefetcht0, whose misses compete with the loop's own for the L1 miss buffers). x86 only; included by the ISA
// translation units.
#pragma once

#include <xmmintrin.h>

#include <cstddef>
#include <cstdint>

namespace memtile::cpu::detail {

struct row_prefetcher {
    const char* p = nullptr;
    const char* end = nullptr;
    void start(const uint8_t* begin, size_t bytes) {
        p = reinterpret_cast<const char*>(begin);
        end = p + bytes;
    }
    void step(int per) {
        for (int i = 0; i < per && p < end; i++, p += 64) _mm_prefetch(p, _MM_HINT_T1);
    }
};

}  // namespace memtile::cpu::detail
