// Device profiles of the emulated CUDA device, chosen by ASTR_CUDA_EMU_PROFILE (default sm_90, an
// H200). cudaGetDeviceProperties, cudaDeviceGetAttribute and cudaMemGetInfo answer from it, and
// launches are checked against its shared-memory limit.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace astr::emu {

struct Profile {
  std::string key;           // "h200", "a100", ...
  std::string aliases;       // other names it answers to, space-separated ("sm_90")
  std::string display_name;  // cudaDeviceProp::name: "emulated sm_90 (H200 profile)"
  int major = 9, minor = 0;
  int sms = 132;
  size_t smem_optin = 232448;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
  size_t smem_per_sm = 233472;
  size_t total_mem = 0;
  int l2_bytes = 0;
  int bus_width = 0;
  int max_threads_per_sm = 2048;
};

const std::vector<Profile>& Profiles();
// The profile ASTR_CUDA_EMU_PROFILE names (an unknown name is reported on stderr once and the
// default is used). ASTR_CUDA_EMU_MEMORY_MB, when set, replaces its memory size.
const Profile& CurrentProfile();
// Memory cudaMalloc may hand out: the profile's minus what a CUDA context keeps (512 MiB).
size_t UsableMemory();

}  // namespace astr::emu
