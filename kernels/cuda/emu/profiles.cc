#include "kernels/cuda/emu/profiles.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace astr::emu {

const std::vector<Profile>& Profiles() {
  static const std::vector<Profile> profiles = [] {
    std::vector<Profile> v;
    auto add = [&](const char* key, const char* aliases, const char* gpu, int major, int minor,
                   int sms, size_t optin, size_t per_sm, size_t mem_mib, int l2_mib, int bus) {
      Profile p;
      p.key = key;
      p.aliases = aliases;
      p.display_name =
          "emulated sm_" + std::to_string(major * 10 + minor) + " (" + gpu + " profile)";
      p.major = major;
      p.minor = minor;
      p.sms = sms;
      p.smem_optin = optin;
      p.smem_per_sm = per_sm;
      p.total_mem = mem_mib << 20;
      p.l2_bytes = l2_mib << 20;
      p.bus_width = bus;
      p.max_threads_per_sm = major == 8 && minor != 0 ? 1536 : 2048;
      v.push_back(p);
    };
    // Limits as the CUDA runtime reports them for these parts (227 KB opt-in on Hopper, 163 KB on
    // A100, 99 KB on the sm_86 / sm_89 parts).
    add("h200", "sm_90 h200", "H200", 9, 0, 132, 232448, 233472, 143771, 50, 6144);
    add("h100", "h100", "H100", 9, 0, 132, 232448, 233472, 81559, 50, 5120);
    add("a100", "sm_80 a100", "A100", 8, 0, 108, 166912, 167936, 81038, 40, 5120);
    add("l40s", "sm_89 l40s", "L40S", 8, 9, 142, 101376, 102400, 45589, 96, 384);
    add("l4", "l4", "L4", 8, 9, 58, 101376, 102400, 22563, 48, 192);
    add("a10", "sm_86 a10", "A10", 8, 6, 72, 101376, 102400, 22731, 6, 384);
    return v;
  }();
  return profiles;
}

const Profile& CurrentProfile() {
  static const Profile profile = [] {
    const char* env = std::getenv("ASTR_CUDA_EMU_PROFILE");
    std::string want = env != nullptr && *env != '\0' ? env : "sm_90";
    const Profile* found = nullptr;
    for (const Profile& p : Profiles()) {
      std::istringstream names(p.key + " " + p.aliases);
      for (std::string n; names >> n;) {
        if (n == want) found = &p;
      }
      if (found != nullptr) break;
    }
    if (found == nullptr) {
      std::fprintf(stderr,
                   "astr cuda-emu: unknown ASTR_CUDA_EMU_PROFILE '%s' (known: sm_90 h200 h100 "
                   "sm_80 a100 sm_89 l40s l4 sm_86 a10); using sm_90\n",
                   want.c_str());
      found = &Profiles().front();
    }
    Profile p = *found;
    if (const char* mem = std::getenv("ASTR_CUDA_EMU_MEMORY_MB"); mem != nullptr && *mem) {
      p.total_mem = static_cast<size_t>(std::atoll(mem)) << 20;
    }
    return p;
  }();
  return profile;
}

size_t UsableMemory() {
  const size_t total = CurrentProfile().total_mem;
  const size_t context = size_t{512} << 20;
  return total > 2 * context ? total - context : total / 2;
}

}  // namespace astr::emu
