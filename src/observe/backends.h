// The compute backends this binary knows, whether each is compiled in, and whether its device is present
// (diag, --version, bench). Data-driven: a backend adds one row to the table in backends.cpp. A compiled-in
// backend answers for itself whether a usable device is present (CUDA: the runtime's device count).
#pragma once

#include <string>
#include <vector>

namespace memtile {

struct backend_status {
    std::string name;             // "cpu", "cuda"
    bool compiled = false;        // built into this binary
    bool device_present = false;  // a device this backend can use is here
    std::string detail;           // e.g. "avx2 kernels", "NVIDIA driver present, backend not compiled in"
};

std::vector<backend_status> list_backends();

}  // namespace memtile
