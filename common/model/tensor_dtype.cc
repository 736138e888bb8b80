#include "common/model/tensor_dtype.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>

namespace astr::model {
namespace {

constexpr int kQBlock = 32;

uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
void StoreU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFF);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// Decoders of the block types into QuantLayoutOf's form: unsigned quants q (one per element, in
// element order), one scale per sub-block and, with has_min, one min per sub-block. Each takes
// `blocks` blocks of src.

void DecodeQ8_0(const uint8_t* src, int64_t blocks, uint8_t* q, float* scale, float*) {
  for (int64_t b = 0; b < blocks; ++b, src += 34, q += kQBlock) {
    scale[b] = F16ToF32(LoadU16(src));
    for (int j = 0; j < kQBlock; ++j)
      q[j] = static_cast<uint8_t>(static_cast<int8_t>(src[2 + j]) + 128);
  }
}

// Q4_0 / Q4_1: byte j holds element j (low nibble) and j + 16 (high nibble).
void DecodeQ4(bool with_min, const uint8_t* src, int64_t blocks, uint8_t* q, float* scale,
              float* min) {
  const int header = with_min ? 4 : 2;
  for (int64_t b = 0; b < blocks; ++b, src += header + 16, q += kQBlock) {
    scale[b] = F16ToF32(LoadU16(src));
    if (with_min) min[b] = F16ToF32(LoadU16(src + 2));
    for (int j = 0; j < 16; ++j) {
      q[j] = src[header + j] & 0x0F;
      q[j + 16] = src[header + j] >> 4;
    }
  }
}

// Q5_0 / Q5_1: the Q4 nibbles plus a fifth bit from qh.
void DecodeQ5(bool with_min, const uint8_t* src, int64_t blocks, uint8_t* q, float* scale,
              float* min) {
  const int header = with_min ? 4 : 2;
  for (int64_t b = 0; b < blocks; ++b, src += header + 4 + 16, q += kQBlock) {
    scale[b] = F16ToF32(LoadU16(src));
    if (with_min) min[b] = F16ToF32(LoadU16(src + 2));
    const uint32_t qh = static_cast<uint32_t>(src[header]) | (src[header + 1] << 8) |
                        (src[header + 2] << 16) | (static_cast<uint32_t>(src[header + 3]) << 24);
    const uint8_t* qs = src + header + 4;
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<uint8_t>((qs[j] & 0x0F) | (((qh >> j) & 1) << 4));
      q[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
    }
  }
}

constexpr int kKBlock = 256;

// Where a decoder with per-256 factors records them and its integer sub-block scales (DecodeQuant's
// `super`; nothing when that is null).
struct SuperSink {
  const SuperScales* out;
  int64_t unit = 0, sub = 0;
  void Factors(float d, float dmin) {
    if (out == nullptr) return;
    out->d[unit] = d;
    if (out->dmin != nullptr) out->dmin[unit] = dmin;
    ++unit;
  }
  void Scale(int sc, int m = 0) {
    if (out == nullptr) return;
    out->sc[sub] = static_cast<int8_t>(sc);
    if (out->m != nullptr) out->m[sub] = static_cast<int8_t>(m);
    ++sub;
  }
};

// Q2_K: 16 sub-blocks of 16; sub-block s has scale (scales[s] & 15) * d and min -(scales[s] >> 4)
// * dmin. Its 2-bit values sit in qs: the 128 elements of each half are 4 shifts (0, 2, 4, 6) of
// 32 bytes, each shift covering two sub-blocks (bytes 0..15 and 16..31).
void DecodeQ2K(const uint8_t* src, int64_t blocks, uint8_t* q, float* scale, float* min,
               SuperSink& sink) {
  for (int64_t b = 0; b < blocks; ++b, src += 84) {
    const uint8_t* scales = src;
    const uint8_t* qs = src + 16;
    const float d = F16ToF32(LoadU16(src + 80));
    const float dmin = F16ToF32(LoadU16(src + 82));
    sink.Factors(d, -dmin);
    int s = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* qh = qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part, ++s) {
          *scale++ = d * static_cast<float>(scales[s] & 15);
          *min++ = -(dmin * static_cast<float>(scales[s] >> 4));
          sink.Scale(scales[s] & 15, scales[s] >> 4);
          for (int l = 0; l < 16; ++l) *q++ = (qh[16 * part + l] >> shift) & 3;
        }
      }
    }
  }
}

// Q3_K: 16 sub-blocks of 16 with 6-bit signed scales (stored - 32): the low 4 bits of scale s are
// the low nibble of byte s (s < 8) or the high nibble of byte s - 8, its high 2 bits are bits
// 2 * (s / 4) and 2 * (s / 4) + 1 of byte 8 + s % 4. Values are 2 low bits from qs (as Q2_K) and
// a high bit from hmask, set meaning +0 and clear meaning -4; q = value + 4.
void DecodeQ3K(const uint8_t* src, int64_t blocks, uint8_t* q, float* scale, float*,
               SuperSink& sink) {
  for (int64_t b = 0; b < blocks; ++b, src += 110) {
    const uint8_t* hmask = src;
    const uint8_t* qs = src + 32;
    const uint8_t* packed = src + 96;
    const float d = F16ToF32(LoadU16(src + 108));
    sink.Factors(d, 0.0f);
    int s = 0;
    uint8_t bit = 1;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* qh = qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2, bit = static_cast<uint8_t>(bit << 1)) {
        for (int part = 0; part < 2; ++part, ++s) {
          const int low = s < 8 ? packed[s] & 15 : packed[s - 8] >> 4;
          const int high = (packed[8 + s % 4] >> (2 * (s / 4))) & 3;
          *scale++ = d * static_cast<float>((low | (high << 4)) - 32);
          sink.Scale((low | (high << 4)) - 32);
          for (int l = 0; l < 16; ++l) {
            const int i = 16 * part + l;
            *q++ = static_cast<uint8_t>(((qh[i] >> shift) & 3) + ((hmask[i] & bit) ? 4 : 0));
          }
        }
      }
    }
  }
}

// ggml's kvalues_iq4nl: the 16 values a 4-bit IQ4 index stands for.
constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

// kIq4Values + 128: the quants IQ4_NL / IQ4_XS's nibbles stand for (QuantLayout::table).
constexpr uint8_t kIq4Quants[16] = {1,   24,  45,  63,  79,  93,  106, 118,
                                    129, 141, 153, 166, 181, 197, 217, 241};
constexpr bool Iq4QuantsAreTheValues() {
  for (int i = 0; i < 16; ++i) {
    if (kIq4Quants[i] != kIq4Values[i] + 128) return false;
  }
  return true;
}
static_assert(Iq4QuantsAreTheValues());

// IQ4_NL: as Q4_0's nibbles, each kept as the index into kIq4Values (QuantLayout::table gives its
// quant).
void DecodeIq4Nl(const uint8_t* src, int64_t blocks, uint8_t* q, float* scale, float*) {
  for (int64_t b = 0; b < blocks; ++b, src += 18, q += kQBlock) {
    scale[b] = F16ToF32(LoadU16(src));
    for (int j = 0; j < 16; ++j) {
      q[j] = src[2 + j] & 0x0F;
      q[j + 16] = src[2 + j] >> 4;
    }
  }
}

// ggml's kvalues_mxfp4: FP4 E2M1's values, doubled (the block scale is half E8M0's).
constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// E8M0 exponent e as ggml's half scale: 2^(e - 128) (2^-128 and 2^-127, subnormal, for e < 2).
float Mxfp4Scale(uint8_t e) { return std::ldexp(1.0f, static_cast<int>(e) - 128); }

// kMxfp4Values + 128: the quants MXFP4's nibbles stand for (QuantLayout::table).
constexpr uint8_t kMxfp4Quants[16] = {128, 129, 130, 131, 132, 134, 136, 140,
                                      128, 127, 126, 125, 124, 122, 120, 116};

// MXFP4: as Q4_0's nibbles, each kept as the index (QuantLayout::table gives its quant).
void DecodeMxfp4(const uint8_t* src, int64_t blocks, uint8_t* q, float* scale, float*) {
  for (int64_t b = 0; b < blocks; ++b, src += 17, q += kQBlock) {
    scale[b] = Mxfp4Scale(src[0]);
    for (int j = 0; j < 16; ++j) {
      q[j] = src[1 + j] & 0x0F;
      q[j + 16] = src[1 + j] >> 4;
    }
  }
}

// ggml's quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127 (0 for an all-zero block), each
// value the table entry nearest to it / 2^(e - 128) (the first of two equally near).
void QuantizeMxfp4(const float* src, int64_t blocks, uint8_t* dst) {
  for (int64_t b = 0; b < blocks; ++b, src += kQBlock, dst += 17) {
    float amax = 0.0f;
    for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(src[j]));
    const uint8_t e = amax > 0.0f ? static_cast<uint8_t>(std::floor(std::log2(amax)) - 2 + 127) : 0;
    const float d = Mxfp4Scale(e);
    auto best = [d](float x) {
      int best_i = 0;
      float best_err = std::fabs(kMxfp4Values[0] * d - x);
      for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(kMxfp4Values[i] * d - x);
        if (err < best_err) best_i = i, best_err = err;
      }
      return static_cast<uint8_t>(best_i);
    };
    dst[0] = e;
    for (int j = 0; j < 16; ++j) {
      dst[1 + j] = static_cast<uint8_t>(best(src[j]) | (best(src[j + 16]) << 4));
    }
  }
}

// IQ4_XS: 8 sub-blocks of 32, each laid out as one IQ4_NL block's nibbles, with scale d * (ls -
// 32), ls = low nibble of scales_l[s / 2] (high nibble for odd s) | bits 2s, 2s + 1 of scales_h.
void DecodeIq4Xs(const uint8_t* src, int64_t blocks, uint8_t* q, float* scale, float*,
                 SuperSink& sink) {
  for (int64_t b = 0; b < blocks; ++b, src += 136) {
    const float d = F16ToF32(LoadU16(src));
    sink.Factors(d, 0.0f);
    const uint16_t scales_h = LoadU16(src + 2);
    const uint8_t* scales_l = src + 4;
    const uint8_t* qs = src + 8;
    for (int s = 0; s < 8; ++s, q += kQBlock) {
      const int ls =
          ((scales_l[s / 2] >> (4 * (s % 2))) & 0x0F) | (((scales_h >> (2 * s)) & 3) << 4);
      *scale++ = d * static_cast<float>(ls - 32);
      sink.Scale(ls - 32);
      for (int j = 0; j < 16; ++j) {
        q[j] = qs[16 * s + j] & 0x0F;
        q[j + 16] = qs[16 * s + j] >> 4;
      }
    }
  }
}

// Q4_K / Q5_K's 8 sub-block scales and mins, 6 bits each, packed in 12 bytes.
void ScaleMinK4(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K (fifth_bit false) and Q5_K: 8 sub-blocks of 32, value = q * d * scale - dmin * min. Each 32
// bytes of qs hold two sub-blocks (low nibbles, then high); Q5_K's qh bit 2k / 2k + 1 of byte l is
// the fifth bit of element l of sub-block 2k / 2k + 1.
void DecodeQ45K(bool fifth_bit, const uint8_t* src, int64_t blocks, uint8_t* q, float* scale,
                float* min, SuperSink& sink) {
  const int bytes = fifth_bit ? 176 : 144;
  for (int64_t b = 0; b < blocks; ++b, src += bytes) {
    const float d = F16ToF32(LoadU16(src));
    const float dmin = F16ToF32(LoadU16(src + 2));
    sink.Factors(d, -dmin);
    const uint8_t* packed = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* qs = src + (fifth_bit ? 48 : 16);
    for (int pair = 0; pair < 4; ++pair) {
      const uint8_t* qp = qs + 32 * pair;
      for (int part = 0; part < 2; ++part) {
        const int sub = 2 * pair + part;
        int sc = 0, mn = 0;
        ScaleMinK4(sub, packed, &sc, &mn);
        *scale++ = d * static_cast<float>(sc);
        *min++ = -(dmin * static_cast<float>(mn));
        sink.Scale(sc, mn);
        for (int l = 0; l < 32; ++l) {
          int v = part == 0 ? qp[l] & 15 : qp[l] >> 4;
          if (fifth_bit && ((qh[l] >> sub) & 1)) v += 16;
          *q++ = static_cast<uint8_t>(v);
        }
      }
    }
  }
}

// Q6_K: 16 sub-blocks of 16 with int8 scales; value = (6-bit q - 32) * d * scale. Each half of 128
// elements takes 64 bytes of ql (low 4 bits: bytes 0..31 low nibbles -> elements 0..31, 32..63
// low -> 32..63, 0..31 high -> 64..95, 32..63 high -> 96..127) and 32 bytes of qh (2 bits each, at
// shifts 0, 2, 4, 6 for those four quarters).
void DecodeQ6K(const uint8_t* src, int64_t blocks, uint8_t* q, float* scale, float*,
               SuperSink& sink) {
  for (int64_t b = 0; b < blocks; ++b, src += 210, q += kKBlock, scale += 16) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* scales = reinterpret_cast<const int8_t*>(src + 192);
    const float d = F16ToF32(LoadU16(src + 208));
    sink.Factors(d, 0.0f);
    for (int s = 0; s < 16; ++s) {
      scale[s] = d * static_cast<float>(scales[s]);
      sink.Scale(scales[s]);
    }
    for (int half = 0; half < 2; ++half) {
      const uint8_t* l4 = ql + 64 * half;
      const uint8_t* h2 = qh + 32 * half;
      uint8_t* out = q + 128 * half;
      for (int l = 0; l < 32; ++l) {
        out[l] = static_cast<uint8_t>((l4[l] & 15) | (((h2[l] >> 0) & 3) << 4));
        out[l + 32] = static_cast<uint8_t>((l4[l + 32] & 15) | (((h2[l] >> 2) & 3) << 4));
        out[l + 64] = static_cast<uint8_t>((l4[l] >> 4) | (((h2[l] >> 4) & 3) << 4));
        out[l + 96] = static_cast<uint8_t>((l4[l + 32] >> 4) | (((h2[l] >> 6) & 3) << 4));
      }
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
    case DType::kQ5_0:
      return "Q5_0";
    case DType::kQ5_1:
      return "Q5_1";
    case DType::kQ2_K:
      return "Q2_K";
    case DType::kQ3_K:
      return "Q3_K";
    case DType::kQ4_K:
      return "Q4_K";
    case DType::kQ5_K:
      return "Q5_K";
    case DType::kQ6_K:
      return "Q6_K";
    case DType::kIQ4_NL:
      return "IQ4_NL";
    case DType::kMXFP4:
      return "MXFP4";
    case DType::kIQ4_XS:
      return "IQ4_XS";
  }
  return "?";
}

bool DTypeWritable(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kMXFP4:
      return true;
    default:
      return false;
  }
}

StatusOr<DType> ParseDType(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4}) {
    if (upper == DTypeName(d)) return d;
  }
  return InvalidArgumentError("unknown dtype '" + std::string(name) +
                              "' (expected f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, "
                              "q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs or mxfp4)");
}

int64_t DTypeBlockElements(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kIQ4_NL:
    case DType::kMXFP4:
      return kQBlock;
    case DType::kIQ4_XS:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return kKBlock;
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
    case DType::kQ5_0:
      return 22;
    case DType::kQ5_1:
      return 24;
    case DType::kQ2_K:
      return 84;
    case DType::kQ3_K:
      return 110;
    case DType::kQ4_K:
      return 144;
    case DType::kQ5_K:
      return 176;
    case DType::kQ6_K:
      return 210;
    case DType::kIQ4_NL:
      return 18;
    case DType::kIQ4_XS:
      return 136;
    case DType::kMXFP4:
      return 17;
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

void DequantizeToF32(DType dtype, const void* src, int64_t n, float* dst) {
  // An empty tensor has nothing to convert (and its destination may be an empty vector's null).
  if (n <= 0) return;
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
    default:
      break;
  }
  // Block types: decode a chunk of whole blocks at a time, then combine.
  const QuantLayout layout = *QuantLayoutOf(dtype);
  const int64_t block = DTypeBlockElements(dtype);
  constexpr int64_t kChunk = 256;  // a multiple of every block size
  uint8_t q[kChunk];
  float scale[kChunk / 16], min[kChunk / 16];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    DecodeQuant(dtype, p + (i / block) * DTypeBlockBytes(dtype), len, q, scale, min);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t sb = j / layout.sub;
      const int qj = layout.table != nullptr ? layout.table[q[j]] : q[j];
      dst[i + j] = layout.has_min ? scale[sb] * static_cast<float>(qj) + min[sb]
                                  : scale[sb] * static_cast<float>(qj - layout.offset);
    }
  }
}

std::optional<QuantLayout> QuantLayoutOf(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return QuantLayout{8, 32, false, 128};
    case DType::kQ4_0:
      return QuantLayout{4, 32, false, 8};
    case DType::kQ4_1:
      return QuantLayout{4, 32, true, 0, DotType::kQ8_1};
    case DType::kQ5_0:
      return QuantLayout{6, 32, false, 16};
    case DType::kQ5_1:
      return QuantLayout{6, 32, true, 0, DotType::kQ8_1};
    case DType::kQ2_K:
      return QuantLayout{4, 16, true, 0, DotType::kQ8_K, true};
    case DType::kQ3_K:
      return QuantLayout{6, 16, false, 4, DotType::kQ8_K, true};
    case DType::kQ4_K:
      return QuantLayout{4, 32, true, 0, DotType::kQ8_K, true};
    case DType::kQ5_K:
      return QuantLayout{6, 32, true, 0, DotType::kQ8_K, true};
    case DType::kQ6_K:
      return QuantLayout{6, 16, false, 32, DotType::kQ8_K, true};
    case DType::kIQ4_NL:
      return QuantLayout{4, 32, false, 128, DotType::kQ8_0, false, kIq4Quants};
    case DType::kIQ4_XS:
      return QuantLayout{4, 32, false, 128, DotType::kQ8_K, true, kIq4Quants};
    case DType::kMXFP4:
      return QuantLayout{4, 32, false, 128, DotType::kQ8_0, false, kMxfp4Quants};
    default:
      return std::nullopt;
  }
}

void DecodeQuant(DType dtype, const void* src, int64_t n, uint8_t* q, float* scale, float* min,
                 const SuperScales* super) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  const int64_t blocks = n / DTypeBlockElements(dtype);
  SuperSink sink{super};
  switch (dtype) {
    case DType::kQ8_0:
      return DecodeQ8_0(p, blocks, q, scale, min);
    case DType::kQ4_0:
      return DecodeQ4(false, p, blocks, q, scale, min);
    case DType::kQ4_1:
      return DecodeQ4(true, p, blocks, q, scale, min);
    case DType::kQ5_0:
      return DecodeQ5(false, p, blocks, q, scale, min);
    case DType::kQ5_1:
      return DecodeQ5(true, p, blocks, q, scale, min);
    case DType::kQ2_K:
      return DecodeQ2K(p, blocks, q, scale, min, sink);
    case DType::kQ3_K:
      return DecodeQ3K(p, blocks, q, scale, min, sink);
    case DType::kQ4_K:
      return DecodeQ45K(false, p, blocks, q, scale, min, sink);
    case DType::kQ5_K:
      return DecodeQ45K(true, p, blocks, q, scale, min, sink);
    case DType::kQ6_K:
      return DecodeQ6K(p, blocks, q, scale, min, sink);
    case DType::kIQ4_NL:
      return DecodeIq4Nl(p, blocks, q, scale, min);
    case DType::kIQ4_XS:
      return DecodeIq4Xs(p, blocks, q, scale, min, sink);
    case DType::kMXFP4:
      return DecodeMxfp4(p, blocks, q, scale, min);
    default:
      std::abort();  // not a block type (QuantLayoutOf says which are)
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
    case DType::kMXFP4:
      QuantizeMxfp4(src, n / kQBlock, p);
      return;
    default:
      // Not writable (DTypeWritable): callers check first.
      std::abort();
  }
}

}  // namespace astr::model
