// isa::avx512_gfni's kernel set of the interleaved layouts (the kernels: x8-kernels-512.h): the only unit built with
// -mgfni (CMakeLists.txt), selected at run time only where the CPU has GFNI (cpu-isa.cpp).
#include "backends/cpu/avx512/x8-kernels-512.h"

namespace memtile::cpu::detail {

const repack_kernel_set* avx512_gfni_repack_kernels() {
    return &avx512::k_x8_set<true>;
}

}  // namespace memtile::cpu::detail
