#include "observe/backends.h"

#include <fmt/format.h>

#include <filesystem>

#include "backends/cpu/cpu-isa.h"
#include "backends/cuda/cuda-backend.h"

namespace memtile {
namespace {

backend_status cpu_backend() {
    backend_status s{"cpu", true, true, ""};
    std::string paths;
    for (const auto i : cpu::all_isas())
        if (cpu::isa_supported(i)) paths += std::string(paths.empty() ? "" : ", ") + std::string(cpu::isa_name(i));
    s.detail = fmt::format(
        "active kernels: {}; usable here: {}{}", cpu::isa_name(cpu::active_isa()), paths,
        cpu::is_avx512(cpu::active_isa()) && cpu::amx_usable() ? "; Q8_0, Q4_0 and K-quant prefill on AMX" : "");
    return s;
}

backend_status cuda_backend() {
    if (cuda::compiled()) {
        // The runtime's own answer: a driver, a device of a supported architecture, memory to create a context.
        const bool usable = cuda::device_count() > 0;
        return {"cuda", true, usable, cuda::device_description()};
    }
    std::error_code ec;
    // The NVIDIA kernel driver lists one folder per GPU here; /dev/nvidia0 exists where the driver is loaded.
    bool present = std::filesystem::exists("/dev/nvidia0", ec);
    if (std::filesystem::is_directory("/proc/driver/nvidia/gpus", ec))
        present = present || !std::filesystem::is_empty("/proc/driver/nvidia/gpus", ec);
    return {
        "cuda", false, present,
        present ? "NVIDIA GPU present, but this binary has no CUDA backend" : "not compiled in, no NVIDIA GPU found"};
}

}  // namespace

std::vector<backend_status> list_backends() {
    using probe = backend_status (*)();
    static constexpr probe table[] = {cpu_backend, cuda_backend};
    std::vector<backend_status> out;
    for (const auto p : table) out.push_back(p());
    return out;
}

}  // namespace memtile
