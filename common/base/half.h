// The one scalar conversion between f32 and the 16-bit floats (IEEE binary16 "f16" and bfloat16),
// exact in the f16/bf16 -> f32 direction and round-to-nearest-even in the other, as the hardware
// instructions (vcvtph2ps / vcvtps2ph, vcvtneps2bf16) do. Header-only: the CPU kernels use it too.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace astr {

inline float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

// Exact: subnormals, infinities and NaN payloads included.
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return BitsToFloat(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return BitsToFloat(sign);
  const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // subnormal: mant * 2^-24
  return sign ? -v : v;
}

// Round to nearest even; overflow (>= 65520) -> inf; NaN stays NaN (quiet).
inline uint16_t F32ToF16(float f) {
  const uint32_t x = FloatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u);
  if (abs >= 0x477FF000u) return sign | 0x7C00u;
  if (abs < 0x38800000u) {  // below the smallest normal f16 (2^-14): value / 2^-24, rounded
    return sign | static_cast<uint16_t>(std::nearbyint(BitsToFloat(abs) * 16777216.0f));
  }
  const uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);  // nearest even at bit 13
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

inline float Bf16ToF32(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t F32ToBf16(float f) {
  const uint32_t x = FloatToBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace astr
