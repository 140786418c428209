// isa::avx512's kernel set of the interleaved layouts (the kernels: x8-kernels-512.h).
#include "backends/cpu/avx512/x8-kernels-512.h"

namespace memtile::cpu::detail {

const repack_kernel_set* avx512_repack_kernels() {
    return &avx512::k_x8_set<false>;
}

}  // namespace memtile::cpu::detail
