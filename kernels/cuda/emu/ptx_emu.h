// The emulated device's versions of ptx.cuh's inline-PTX wrappers (included by ptx.cuh under
// ASTR_CUDA_EMU). Same signatures; each forwards to the emulator's rendezvous of the 32 lanes
// (ldmatrix, mma.sync) or to the issuing thread's cp.async groups.
#pragma once

#include <cstdint>

#include "kernels/cuda/emu/emu.h"

namespace astr::cuda::ptx {

inline uint32_t SmemAddr(const void* p) { return ::astr::emu::SharedOffset(p); }
inline void CpAsync16(uint32_t dst, const void* src, int src_bytes) {
  ::astr::emu::CpAsync16(dst, src, src_bytes);
}
inline void CpAsyncCommit() { ::astr::emu::CpAsyncCommit(); }
template <int kPending>
inline void CpAsyncWait() {
  ::astr::emu::CpAsyncWait(kPending);
}
inline void LdMatrixX4(uint32_t (&r)[4], uint32_t addr) { ::astr::emu::LdMatrixX4(r, addr, false); }
inline void LdMatrixX4Trans(uint32_t (&r)[4], uint32_t addr) {
  ::astr::emu::LdMatrixX4(r, addr, true);
}
inline void Mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ::astr::emu::Mma16816(d, a, b0, b1);
}

}  // namespace astr::cuda::ptx
