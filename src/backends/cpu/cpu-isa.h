// Instruction-set paths of the CPU kernels and their run-time selection.
//
// Each optimized path lives in its own translation units compiled with that ISA's target flags
// (src/backends/cpu/<isa>/), so the library runs on any x86-64 and picks the best path the CPU supports.
// Selection order: force_isa() if called, else the MEMTILE_ISA environment variable ("scalar", "avx2",
// "avx512", "avx512_gfni"), else the best supported path. Forcing a path the CPU or the build lacks is an error.
#pragma once

#include <string_view>
#include <vector>

namespace memtile::cpu {

// avx512_gfni: the avx512 path whose K-quant kernels of the interleaved layouts unpack bit fields with GFNI affine
// transforms (one instruction where avx512 needs a shift and a mask); Ice Lake, AMD Zen 4 and later have it,
// Skylake-X / Cascade Lake not. Everything else of that path is avx512's.
enum class isa { scalar, avx2, avx512, avx512_gfni };

std::string_view isa_name(isa i);
// True when the path is compiled in and the CPU (and OS) support its instructions.
bool isa_supported(isa i);
// Why isa_supported is false, e.g. "CPU lacks avx512vnni"; empty when supported.
std::string_view isa_missing_reason(isa i);
// Every path, best first (supported or not), for tests that run all of them.
std::vector<isa> all_isas();

// The path matmul uses now.
isa active_isa();
// True for avx512 and avx512_gfni.
bool is_avx512(isa i);
// True when the CPU has AMX-TILE and AMX-INT8, Linux granted this process the tile state (asked once, by
// arch_prctl ARCH_REQ_XCOMP_PERM) and MEMTILE_CPU_AMX is not 0; the AVX-512 paths then prefill Q8_0 on AMX
// (avx512/matmul-avx512-amx.cpp).
bool amx_usable();
// Forces a path by name ("scalar", "avx2", "avx512", "avx512_gfni"), or "auto" / "" to return to automatic selection.
// Not thread-safe against concurrent matmul calls: set it before starting work (tests, benchmarks).
void force_isa(std::string_view name);
void force_isa(isa i);

}  // namespace memtile::cpu
