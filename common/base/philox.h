// Philox4x32-10 counter-based random numbers (Salmon et al., "Parallel Random Numbers: As Easy as
// 1, 2, 3", SC'11), bit-compatible with Random123's philox4x32 with 10 rounds.
//
// Why counter-based: a draw is a pure function of (key, counter), so the token sampled for
// (seed, sequence, token_index) is the same whichever batch, order or worker computes it. There is
// no generator state to carry, copy or restore when a sequence moves between workers.
//
// The header is plain C++ (no std containers, no exceptions) so the same code compiles for CUDA
// device code as well.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define ASTR_PHILOX_FN __host__ __device__ inline
#else
#define ASTR_PHILOX_FN inline
#endif

namespace astr::philox {

inline constexpr uint32_t kMul0 = 0xD2511F53u;
inline constexpr uint32_t kMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1
inline constexpr int kRounds = 10;

struct Counter {
  uint32_t v[4];
};
struct Key {
  uint32_t v[2];
};

ASTR_PHILOX_FN void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

// The raw block function: 10 rounds of Philox4x32 on `counter` under `key`.
ASTR_PHILOX_FN Counter Philox4x32(Counter ctr, Key key) {
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      key.v[0] += kWeyl0;
      key.v[1] += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kMul0, ctr.v[0], &hi0, &lo0);
    MulHiLo(kMul1, ctr.v[2], &hi1, &lo1);
    const Counter next = {{hi1 ^ ctr.v[1] ^ key.v[0], lo1, hi0 ^ ctr.v[3] ^ key.v[1], lo0}};
    ctr = next;
  }
  return ctr;
}

// The block for one sampling draw. The recipe (part of astr's determinism contract: changing it
// changes every seeded output):
//   key     = {lo32(seed), hi32(seed)}
//   counter = {lo32(token_index), hi32(token_index), lo32(sequence), hi32(sequence)}
// `sequence` is the sample's index within its request (0..n-1) and `token_index` the number of
// tokens that sequence had generated before this draw (0 for its first generated token).
ASTR_PHILOX_FN Counter SampleBlock(uint64_t seed, uint64_t sequence, uint64_t token_index) {
  const Counter ctr = {{static_cast<uint32_t>(token_index),
                        static_cast<uint32_t>(token_index >> 32), static_cast<uint32_t>(sequence),
                        static_cast<uint32_t>(sequence >> 32)}};
  const Key key = {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  return Philox4x32(ctr, key);
}

// Uniform double in [0, 1) with 53 random bits: x = (uint64(out[1]) << 32) | out[0], then
// (x >> 11) * 2^-53. out[2] and out[3] are unused (reserved for further draws of the same token).
ASTR_PHILOX_FN double UniformDouble(uint64_t seed, uint64_t sequence, uint64_t token_index) {
  const Counter out = SampleBlock(seed, sequence, token_index);
  const uint64_t bits = (static_cast<uint64_t>(out.v[1]) << 32) | out.v[0];
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// Uniform float in [0, 1) with 24 random bits: (out[0] >> 8) * 2^-24.
ASTR_PHILOX_FN float UniformFloat(uint64_t seed, uint64_t sequence, uint64_t token_index) {
  const Counter out = SampleBlock(seed, sequence, token_index);
  return static_cast<float>(out.v[0] >> 8) * 0x1.0p-24f;
}

}  // namespace astr::philox

#undef ASTR_PHILOX_FN
