// The compute backends this binary knows, whether each is compiled in, and whether its device is present
// (diag, bench). Data-driven: a backend adds one row to the table in backends.cpp; a CUDA build defines
// MEMTILE_HAVE_CUDA (compile definition of memtile_lib) to mark its row compiled.
#pragma once

#include <string>
#include <vector>

namespace memtile {

struct backend_status {
    std::string name;       // "cpu", "cuda"
    bool compiled = false;  // built into this binary
    bool device_present = false;
    std::string detail;  // e.g. "avx2 kernels", "NVIDIA driver present, backend not compiled in"
};

std::vector<backend_status> list_backends();

}  // namespace memtile
