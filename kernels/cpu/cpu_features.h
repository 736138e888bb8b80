// Which x86 vector extensions this CPU (and its OS) can run, and which path the kernels use.
//
// Every kernel has a plain C++ reference (kScalar) and SIMD paths compiled with their own target
// flags; the SIMD files are only entered after the checks here said the CPU supports them.
#pragma once

#include <vector>

namespace astr::cpu {

// Ordered from least to most capable; each level implies the ones before it.
enum class Isa {
  kScalar,      // baseline x86-64, no vector intrinsics beyond SSE2
  kAvx2,        // AVX2 + FMA + F16C
  kAvx512,      // AVX-512 F/BW/VL/DQ + FMA + F16C
  kAvx512Bf16,  // kAvx512 + AVX512_BF16 (vdpbf16ps)
};

// "scalar", "avx2", "avx512", "avx512bf16".
const char* IsaName(Isa isa);
// The best path the CPU supports (CPUID feature bits + XGETBV: the OS saves the vector state).
Isa DetectIsa();
// Whether the CPU (and OS) runs AVX-512 VNNI (vpdpbusd): the block-quantized GEMM's AVX-512 tiles
// need it, and use the AVX2 tiles on AVX-512 CPUs without it.
bool CpuHasAvx512Vnni();
// Whether this process can run AMX-INT8 tiles (tdpbsud): the CPU has AMX-TILE and AMX-INT8 with
// AVX-512 VNNI, the OS saves the tile state (XCR0) and granted this process its use (Linux:
// arch_prctl ARCH_REQ_XCOMP_PERM, asked here once).
bool CpuHasAmx();
// Whether the block-quantized GEMM uses the AMX tiles for calls of several rows on the AVX-512
// paths: CpuHasAmx() and $ASTR_CPU_AMX is not 0. Their results are bit-identical to the VNNI
// tiles' either way. Read once.
bool CpuUsesAmx();
// Every path this CPU can run, kScalar first, in increasing order.
std::vector<Isa> AvailableIsas();
// The path the kernels use: DetectIsa(), or $ASTR_CPU_ISA=scalar|avx2|avx512|avx512bf16 when set.
// An unknown name, or one the CPU cannot run, is logged as a warning and detection is used instead.
// Read once.
Isa ActiveIsa();

}  // namespace astr::cpu
