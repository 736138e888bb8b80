#include "common/model/tensor_dtype.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

namespace astr::model {
namespace {

constexpr int kQBlock = 32;

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
void StoreU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFF);
  p[1] = static_cast<uint8_t>(v >> 8);
}

void DequantizeQ8_0(const uint8_t* src, int64_t blocks, float* dst) {
  for (int64_t b = 0; b < blocks; ++b, src += 34, dst += kQBlock) {
    const float d = F16ToF32(LoadU16(src));
    const int8_t* q = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < kQBlock; ++j) dst[j] = static_cast<float>(q[j]) * d;
  }
}

void DequantizeQ4(bool with_min, const uint8_t* src, int64_t blocks, float* dst) {
  const int header = with_min ? 4 : 2;
  for (int64_t b = 0; b < blocks; ++b, src += header + 16, dst += kQBlock) {
    const float d = F16ToF32(LoadU16(src));
    const float m = with_min ? F16ToF32(LoadU16(src + 2)) : 0.0f;
    const int offset = with_min ? 0 : 8;
    const uint8_t* q = src + header;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((q[j] & 0x0F) - offset) * d + m;
      dst[j + 16] = static_cast<float>((q[j] >> 4) - offset) * d + m;
    }
  }
}

void QuantizeQ8_0(const float* src, int64_t blocks, uint8_t* dst) {
  for (int64_t b = 0; b < blocks; ++b, src += kQBlock, dst += 34) {
    float amax = 0.0f;
    for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    StoreU16(dst, F32ToF16(d));
    int8_t* q = reinterpret_cast<int8_t*>(dst + 2);
    for (int j = 0; j < kQBlock; ++j) q[j] = static_cast<int8_t>(std::lround(src[j] * id));
  }
}

// ggml's quantize_row_q4_0_ref / quantize_row_q4_1_ref.
void QuantizeQ4(bool with_min, const float* src, int64_t blocks, uint8_t* dst) {
  const int header = with_min ? 4 : 2;
  for (int64_t b = 0; b < blocks; ++b, src += kQBlock, dst += header + 16) {
    float d, m = 0.0f;
    if (with_min) {
      float lo = src[0], hi = src[0];
      for (int j = 1; j < kQBlock; ++j) lo = std::min(lo, src[j]), hi = std::max(hi, src[j]);
      d = (hi - lo) / 15.0f;
      m = lo;
      StoreU16(dst + 2, F32ToF16(m));
    } else {
      float amax = 0.0f, max = 0.0f;
      for (int j = 0; j < kQBlock; ++j) {
        if (std::fabs(src[j]) > amax) amax = std::fabs(src[j]), max = src[j];
      }
      d = max / -8.0f;
    }
    StoreU16(dst, F32ToF16(d));
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float bias = with_min ? 0.5f : 8.5f;
    auto q = [&](float x) {
      return static_cast<uint8_t>(std::min(15, static_cast<int>((x - m) * id + bias)));
    };
    for (int j = 0; j < 16; ++j) dst[header + j] = q(src[j]) | (q(src[j + 16]) << 4);
  }
}

}  // namespace

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kQ8_0:
      return "Q8_0";
    case DType::kQ4_0:
      return "Q4_0";
    case DType::kQ4_1:
      return "Q4_1";
  }
  return "?";
}

StatusOr<DType> ParseDType(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (DType d :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    if (upper == DTypeName(d)) return d;
  }
  return InvalidArgumentError("unknown dtype '" + std::string(name) +
                              "' (expected f32, f16, bf16, q8_0, q4_0 or q4_1)");
}

int64_t DTypeBlockElements(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
      return kQBlock;
    default:
      return 1;
  }
}

int64_t DTypeBlockBytes(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kQ8_0:
      return 34;
    case DType::kQ4_0:
      return 18;
    case DType::kQ4_1:
      return 20;
  }
  return 0;
}

StatusOr<uint64_t> DTypeByteSize(DType dtype, int64_t num_elements) {
  const int64_t block = DTypeBlockElements(dtype);
  if (num_elements < 0 || num_elements % block != 0) {
    return InvalidArgumentError(
        std::to_string(num_elements) + " elements is not a whole number of " +
        std::string(DTypeName(dtype)) + " blocks of " + std::to_string(block));
  }
  const uint64_t blocks = static_cast<uint64_t>(num_elements / block);
  const uint64_t per = static_cast<uint64_t>(DTypeBlockBytes(dtype));
  if (blocks > std::numeric_limits<uint64_t>::max() / per) {
    return InvalidArgumentError("tensor byte size overflows");
  }
  return blocks * per;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) return BitsFloat(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return BitsFloat(sign);
  // Subnormal: value = mant * 2^-24.
  const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

uint16_t F32ToF16(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFF;
  if (abs >= 0x7F800000u) {  // inf or NaN
    return sign | 0x7C00 | (abs > 0x7F800000u ? 0x200 : 0);
  }
  if (abs >= 0x477FF000u) return sign | 0x7C00;  // rounds to >= 65520 -> inf
  if (abs < 0x38800000u) {                       // below the smallest normal f16 (2^-14)
    // Subnormal or zero: value / 2^-24 rounded to nearest even.
    const float v = BitsFloat(abs) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(v));
  }
  uint32_t rounded = abs + 0xFFF + ((abs >> 13) & 1);  // round to nearest even at bit 13
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

float Bf16ToF32(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

uint16_t F32ToBf16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

void DequantizeToF32(DType dtype, const void* src, int64_t n, float* dst) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, p, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(LoadU16(p + 2 * i));
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(LoadU16(p + 2 * i));
      return;
    case DType::kQ8_0:
      DequantizeQ8_0(p, n / kQBlock, dst);
      return;
    case DType::kQ4_0:
      DequantizeQ4(false, p, n / kQBlock, dst);
      return;
    case DType::kQ4_1:
      DequantizeQ4(true, p, n / kQBlock, dst);
      return;
  }
}

void QuantizeFromF32(DType dtype, const float* src, int64_t n, void* dst) {
  uint8_t* p = static_cast<uint8_t*>(dst);
  switch (dtype) {
    case DType::kF32:
      std::memcpy(p, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) StoreU16(p + 2 * i, F32ToF16(src[i]));
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) StoreU16(p + 2 * i, F32ToBf16(src[i]));
      return;
    case DType::kQ8_0:
      QuantizeQ8_0(src, n / kQBlock, p);
      return;
    case DType::kQ4_0:
      QuantizeQ4(false, src, n / kQBlock, p);
      return;
    case DType::kQ4_1:
      QuantizeQ4(true, src, n / kQBlock, p);
      return;
  }
}

}  // namespace astr::model
