// Kernel launches and dynamic shared memory, written once for nvcc and for the emulated device
// (kernels/cuda/emu, ASTR_CUDA_EMU), so that a kernel's source is the same for both:
//   ASTR_LAUNCH_KERNEL(Kernel<64>, grid, block, smem_bytes, stream)(args...);
//   ASTR_DYNAMIC_SMEM(smem);  // unsigned char smem[] of the launch's dynamic size, 16-byte aligned
#pragma once

#if defined(ASTR_CUDA_EMU)
#define ASTR_LAUNCH_KERNEL(kernel, grid, block, smem, stream) \
  ::astr::emu::Launch(kernel, #kernel, grid, block, smem, stream)
#define ASTR_DYNAMIC_SMEM(name) unsigned char* const name = ::astr::emu::DynamicShared()
#else
#define ASTR_LAUNCH_KERNEL(kernel, grid, block, smem, stream) kernel<<<grid, block, smem, stream>>>
#define ASTR_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif
