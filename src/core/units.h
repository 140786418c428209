// Human-readable quantities for CLI output.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace memtile {

// Decimal units (MB = 1e6 bytes), as bandwidth figures are quoted in GB/s; binary units on request.
inline std::string format_bytes(uint64_t b, bool binary = false) {
    const double base = binary ? 1024.0 : 1000.0;
    const char* units[] = {"B", binary ? "KiB" : "kB", binary ? "MiB" : "MB", binary ? "GiB" : "GB",
                           binary ? "TiB" : "TB"};
    double v = double(b);
    int u = 0;
    while (v >= base && u < 4) {
        v /= base;
        u++;
    }
    return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace memtile
