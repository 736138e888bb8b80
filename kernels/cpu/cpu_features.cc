#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/base/logging.h"

namespace astr::cpu {
namespace {

struct CpuidRegs {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

CpuidRegs Cpuid(uint32_t leaf, uint32_t subleaf) {
  CpuidRegs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) return CpuidRegs();
  return r;
}

// XCR0: which register states the OS saves on context switch. Without it the instructions fault or
// lose state even when CPUID advertises them (e.g. AVX-512 disabled by the hypervisor or kernel).
uint64_t Xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool Bit(uint32_t reg, int bit) { return (reg >> bit) & 1u; }

Isa Detect() {
  const CpuidRegs l1 = Cpuid(1, 0);
  const bool osxsave = Bit(l1.ecx, 27);
  const bool avx = Bit(l1.ecx, 28), fma = Bit(l1.ecx, 12), f16c = Bit(l1.ecx, 29);
  if (!osxsave || !avx) return Isa::kScalar;
  const uint64_t xcr0 = Xgetbv0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;    // SSE + AVX state
  const bool os_zmm = (xcr0 & 0xE6) == 0xE6;  // + opmask, ZMM_Hi256, Hi16_ZMM
  const CpuidRegs l7 = Cpuid(7, 0);
  const CpuidRegs l7s1 = Cpuid(7, 1);
  const bool avx2 = Bit(l7.ebx, 5);
  if (!os_ymm || !avx2 || !fma || !f16c) return Isa::kScalar;
  const bool avx512 =
      Bit(l7.ebx, 16) && Bit(l7.ebx, 17) && Bit(l7.ebx, 30) && Bit(l7.ebx, 31);  // F DQ BW VL
  if (!os_zmm || !avx512) return Isa::kAvx2;
  const bool bf16 = Bit(l7s1.eax, 5);
  return bf16 ? Isa::kAvx512Bf16 : Isa::kAvx512;
}

Isa ChooseActive() {
  const Isa detected = DetectIsa();
  const char* env = std::getenv("ASTR_CPU_ISA");
  if (env == nullptr || *env == '\0') return detected;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (std::strcmp(env, IsaName(isa)) != 0) continue;
    if (isa <= detected) return isa;
    LOG(WARNING) << "ASTR_CPU_ISA=" << env << " is not supported by this CPU; using "
                 << IsaName(detected);
    return detected;
  }
  LOG(WARNING) << "unknown ASTR_CPU_ISA=" << env << " (want scalar|avx2|avx512|avx512bf16); using "
               << IsaName(detected);
  return detected;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Bf16:
      return "avx512bf16";
  }
  return "unknown";
}

Isa DetectIsa() {
  static const Isa isa = Detect();
  return isa;
}

bool CpuHasAvx512Vnni() {
  static const bool vnni = DetectIsa() >= Isa::kAvx512 && Bit(Cpuid(7, 0).ecx, 11);
  return vnni;
}

bool CpuHasAmx() {
  static const bool amx = [] {
    if (!CpuHasAvx512Vnni()) return false;
    const CpuidRegs l7 = Cpuid(7, 0);
    if (!Bit(l7.edx, 24) || !Bit(l7.edx, 25)) return false;  // AMX-TILE, AMX-INT8
    if ((Xgetbv0() & 0x60000) != 0x60000) return false;        // XTILECFG + XTILEDATA
#ifdef __linux__
    // The tile data state is off until the process asks for it (Linux 5.16+).
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
#endif
    return true;
  }();
  return amx;
}

bool CpuUsesAmx() {
  static const bool uses = [] {
    const char* env = std::getenv("ASTR_CPU_AMX");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
    return CpuHasAmx();
  }();
  return uses;
}

std::vector<Isa> AvailableIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (isa <= DetectIsa()) isas.push_back(isa);
  }
  return isas;
}

Isa ActiveIsa() {
  static const Isa isa = ChooseActive();
  return isa;
}

}  // namespace astr::cpu
