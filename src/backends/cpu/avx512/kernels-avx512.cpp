#include "backends/cpu/kernels.h"

namespace memtile::cpu::detail {

const kernel_set* avx512_kernels() {
    return nullptr;
}

}  // namespace memtile::cpu::detail
