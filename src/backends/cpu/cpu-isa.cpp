#include "backends/cpu/cpu-isa.h"

#include "backends/cpu/attention-kernels.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "backends/cpu/kernels.h"
#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include "core/error.h"

namespace memtile::cpu {
namespace {

// -1: automatic; otherwise the forced isa's value. Read on every matmul call, so an atomic.
std::atomic<int> g_forced{-2};  // -2: not yet initialised from the environment

std::string_view cpu_missing(isa i) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    switch (i) {
        case isa::scalar: return {};
        case isa::avx2:
            if (!__builtin_cpu_supports("avx2")) return "CPU lacks avx2";
            if (!__builtin_cpu_supports("fma")) return "CPU lacks fma";
            return {};
        case isa::avx512:
        case isa::avx512_gfni:
            if (!__builtin_cpu_supports("avx512f")) return "CPU lacks avx512f";
            if (!__builtin_cpu_supports("avx512bw")) return "CPU lacks avx512bw";
            if (!__builtin_cpu_supports("avx512vl")) return "CPU lacks avx512vl";
            if (!__builtin_cpu_supports("avx512vnni")) return "CPU lacks avx512vnni";
            if (i == isa::avx512_gfni && !__builtin_cpu_supports("gfni")) return "CPU lacks gfni";
            return {};
    }
    return "unknown isa";
#else
    return i == isa::scalar ? std::string_view{} : std::string_view{"not an x86-64 build"};
#endif
}

// Linux hands out the AMX tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, 18).
bool request_amx() {
#if defined(__x86_64__) && defined(__linux__)
    if (const char* env = std::getenv("MEMTILE_CPU_AMX"); env && std::string_view(env) == "0") return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    if (!(edx & (1u << 24)) || !(edx & (1u << 25))) return false;  // AMX-TILE, AMX-INT8
    constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
#else
    return false;
#endif
}

const detail::kernel_set* compiled_kernels(isa i) {
    switch (i) {
        case isa::scalar: return nullptr;
        case isa::avx2: return detail::avx2_kernels();
        case isa::avx512:
        case isa::avx512_gfni: return detail::avx512_kernels();
    }
    return nullptr;
}

isa best_isa() {
    for (isa i : all_isas())
        if (isa_supported(i)) return i;
    return isa::scalar;
}

int forced() {
    int f = g_forced.load(std::memory_order_relaxed);
    if (f != -2) return f;
    const char* env = std::getenv("MEMTILE_ISA");
    force_isa(env ? std::string_view(env) : std::string_view());
    return g_forced.load(std::memory_order_relaxed);
}

}  // namespace

std::string_view isa_name(isa i) {
    switch (i) {
        case isa::scalar: return "scalar";
        case isa::avx2: return "avx2";
        case isa::avx512: return "avx512";
        case isa::avx512_gfni: return "avx512_gfni";
    }
    return "unknown";
}

std::string_view isa_missing_reason(isa i) {
    if (i != isa::scalar && compiled_kernels(i) == nullptr) return "path not compiled into this build";
    return cpu_missing(i);
}

bool isa_supported(isa i) {
    return isa_missing_reason(i).empty();
}

std::vector<isa> all_isas() {
    return {isa::avx512_gfni, isa::avx512, isa::avx2, isa::scalar};
}

isa active_isa() {
    const int f = forced();
    return f >= 0 ? isa(f) : best_isa();
}

bool is_avx512(isa i) {
    return i == isa::avx512 || i == isa::avx512_gfni;
}

bool amx_usable() {
    static const bool usable = request_amx();
    return usable;
}

void force_isa(isa i) {
    if (!isa_supported(i)) fail("cpu", "cannot force the {} path: {}", isa_name(i), isa_missing_reason(i));
    g_forced.store(int(i), std::memory_order_relaxed);
}

void force_isa(std::string_view name) {
    if (name.empty() || name == "auto") {
        g_forced.store(-1, std::memory_order_relaxed);
        return;
    }
    for (isa i : all_isas())
        if (isa_name(i) == name) return force_isa(i);
    fail("cpu", "unknown instruction-set path '{}' (expected auto, scalar, avx2, avx512 or avx512_gfni)",
         std::string(name));
}

namespace detail {

#if !(defined(__x86_64__) || defined(__i386__))
const kernel_set* avx2_kernels() {
    return nullptr;
}
const kernel_set* avx512_kernels() {
    return nullptr;
}
const gemm_set* avx2_gemm_kernels() {
    return nullptr;
}
const attention_kernels* avx2_attention_kernels() {
    return nullptr;
}
const attention_kernels* avx512_attention_kernels() {
    return nullptr;
}
const repack_kernel_set* avx2_repack_kernels() {
    return nullptr;
}
const repack_kernel_set* avx512_repack_kernels() {
    return nullptr;
}
const repack_kernel_set* avx512_gfni_repack_kernels() {
    return nullptr;
}
#endif

const kernel_set* active_kernels() {
    return compiled_kernels(active_isa());
}

const repack_kernel_set* active_repack_kernels() {
    switch (active_isa()) {
        case isa::scalar: return nullptr;
        case isa::avx2: return avx2_repack_kernels();
        case isa::avx512: return avx512_repack_kernels();
        case isa::avx512_gfni: return avx512_gfni_repack_kernels();
    }
    return nullptr;
}

}  // namespace detail
}  // namespace memtile::cpu
