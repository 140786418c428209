// Q6_K decode products streamed by warps (matvec-q6k.cu; set_q6k_stream in cuda-backend.h): launch_matvec's product of
// a Q6_K matrix, bit-equal to it, by warps that each stream a run of rows with the next units' loads in flight.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/cuda-kernels.h"

namespace memtile::cuda {

// The kernel's arguments (32-bit: the launch checks that they fit).
struct q6k_stream_args {
    const uint8_t* q;   // row r at q + r row_bytes (device layout, cuda-kernels.h)
    const uint16_t* d;  // row r's f16 scales at d + r d_row
    int n_out, row_bytes, d_row, n_in;
    int rpw;  // rows per warp (streamed kernels); early blocks (early kernels)
};

// The mode of set_q6k_stream (or MEMTILE_CUDA_Q6K=MODE[,ROWS_PER_WARP], read on the first call).
int q6k_stream_mode();
// y (+)= w x by the streamed kernel where the mode covers w (Q6_K whose default shape is 2 x 4 with one task per
// thread, mode bit 1; or 2 x 1 with one task per thread, bit 2); false (nothing launched) otherwise.
bool launch_q6k_stream(const gpu_weight& w, const int8_t* xq, const float* xd, float* y, bool accumulate,
                       cudaStream_t s);

}  // namespace memtile::cuda
