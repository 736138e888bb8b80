// Element types of stored weight tensors (GGUF and safetensors) and their conversions to/from f32.
//
// Block-quantized types follow ggml's layouts exactly so that GGUF bytes can be read in place:
//   Q8_0: 32 elements in 34 bytes  {f16 d; int8 q[32]}          value = q * d
//   Q4_0: 32 elements in 18 bytes  {f16 d; uint8 q[16]}         value = (nibble - 8) * d
//   Q4_1: 32 elements in 20 bytes  {f16 d; f16 m; uint8 q[16]}  value = nibble * d + m
//   Q5_0: 32 elements in 22 bytes  {f16 d; u32 qh; uint8 q[16]}          value = (5-bit q - 16) * d
//   Q5_1: 32 elements in 24 bytes  {f16 d; f16 m; u32 qh; uint8 q[16]}   value = 5-bit q * d + m
// In the Q4/Q5 types byte j holds element j in its low nibble and element j + 16 in its high
// nibble; Q5's fifth bits are bit j of qh (element j) and bit j + 16 (element j + 16).
//
// K-quants (super-blocks of 256 elements, sub-blocks with their own scales):
//   Q2_K  84 bytes  {u8 scales[16] (4-bit scale | 4-bit min); u8 qs[64] (2-bit); f16 d; f16 dmin}
//   Q3_K 110 bytes  {u8 hmask[32]; u8 qs[64] (2-bit low); u8 scales[12] (16 6-bit); f16 d}
//   Q4_K 144 bytes  {f16 d; f16 dmin; u8 scales[12] (8 6-bit scales + 8 6-bit mins); u8 qs[128]}
//   Q5_K 176 bytes  {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
//   Q6_K 210 bytes  {u8 ql[128] (low 4 bits); u8 qh[64] (high 2 bits); i8 scales[16]; f16 d}
// Non-linear 4-bit types (4-bit indices into ggml's 16-value table kvalues_iq4nl, -127..113):
//   IQ4_NL  32 elements in 18 bytes   {f16 d; u8 qs[16]}      value = d * kvalues[nibble]
//   IQ4_XS 256 elements in 136 bytes  {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}: 8
//          sub-blocks of 32 with 6-bit scales (low 4 bits in scales_l, high 2 in scales_h) - 32,
//          value = d * scale * kvalues[nibble]; nibbles as in Q4_0 per sub-block.
// They are read (DequantizeToF32) but not written: QuantizeFromF32 takes DTypeWritable types.
// Microscaling FP4 (gpt-oss's experts; ggml's block_mxfp4):
//   MXFP4   32 elements in 17 bytes   {u8 e (E8M0); u8 qs[16]}  value = 2^(e - 128) *
//          kvalues_mxfp4[nibble] (0, 1, 2, 3, 4, 6, 8, 12, then the same negated: FP4 E2M1 doubled,
//          so the scale is half E8M0's); nibbles as in Q4_0. Written with ggml's reference rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/base/half.h"
#include "common/base/status.h"

namespace astr::model {

enum class DType {
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kIQ4_NL,
  kIQ4_XS,
  kMXFP4,
};

// "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K" ... "Q6_K", "IQ4_NL",
// "IQ4_XS".
std::string_view DTypeName(DType dtype);
// Case-insensitive inverse of DTypeName ("bf16" -> kBF16, "q4_k" -> kQ4_K).
StatusOr<DType> ParseDType(std::string_view name);
// Whether QuantizeFromF32 can write it (F32, F16, BF16, Q8_0, Q4_0, Q4_1, MXFP4).
bool DTypeWritable(DType dtype);
// Elements per block (1 for plain float types, 32 for Q4/Q5/Q8 and IQ4_NL, 256 for the K-quants
// and IQ4_XS).
int64_t DTypeBlockElements(DType dtype);
// Bytes per block.
int64_t DTypeBlockBytes(DType dtype);
// Bytes taken by `num_elements` elements; an error when the count is not a whole number of blocks
// or the size overflows.
StatusOr<uint64_t> DTypeByteSize(DType dtype, int64_t num_elements);

// The scalar 16-bit float conversions (common/base/half.h), under the names model code uses.
using ::astr::Bf16ToF32;
using ::astr::F16ToF32;
using ::astr::F32ToBf16;
using ::astr::F32ToF16;

// The block types as unsigned quants with per-sub-block scales: each element's value is
//   scale * (q - offset)      (has_min false), or
//   scale * q + min           (has_min true),
// with q < 2^bits and one scale (and min) per `sub` consecutive elements. DequantizeToF32 computes
// exactly these floats. Q8_0 and Q5_0 / Q4_0 shift their signed values by the offset (128, 16,
// 8), Q6_K by 32, Q3_K by 4; the K-quants' scales are d x the sub-block's scale and their mins
// -(dmin x the sub-block's min), products taken in f32. IQ4_NL / IQ4_XS / MXFP4 hold 4-bit indices
// into a table of their values + 128 (offset 128; QuantLayout::table).
// `dot` names the activation type llama.cpp multiplies the block type with (ggml's vec_dot_type):
// Q8_0 for Q4_0 / Q5_0 / Q8_0, Q8_1 for Q4_1 / Q5_1, Q8_K for the K-quants.
enum class DotType { kQ8_0, kQ8_1, kQ8_K };
struct QuantLayout {
  int bits = 8;  // 4, 6 or 8: the width the quants are held in (Q2_K's 2 bits: 4; 3 and 5: 6)
  int sub = 32;  // 16 or 32
  bool has_min = false;
  int offset = 0;
  DotType dot = DotType::kQ8_0;
  // Scales (and mins) are an f16 factor per 256 elements times an int8 per sub-block (the
  // K-quants and IQ4_XS; DecodeQuant's `super`).
  bool super = false;
  // MXFP4, IQ4_NL, IQ4_XS: q is a 4-bit index and the quant it stands for is table[q] (16
  // entries; the value is scale * (table[q] - offset)). Null for the others.
  const uint8_t* table = nullptr;
};
// The layout of a block type; nullopt for F32 / F16 / BF16.
std::optional<QuantLayout> QuantLayoutOf(DType dtype);
// A super layout's scales in integer form: per 256 elements d and (with has_min) dmin, per
// sub-block sc and (with has_min) m, with scale = d * sc and min = dmin * m exactly.
struct SuperScales {
  float* d = nullptr;
  float* dmin = nullptr;  // null without has_min
  int8_t* sc = nullptr;
  int8_t* m = nullptr;  // null without has_min
};
// Decodes `num_elements` elements (a whole number of blocks) of a block type: q[num_elements],
// scale[num_elements / sub] and, with has_min, min[num_elements / sub] (unused otherwise); with
// `super` (super layouts only) also their integer form.
void DecodeQuant(DType dtype, const void* src, int64_t num_elements, uint8_t* q, float* scale,
                 float* min, const SuperScales* super = nullptr);

// Converts `num_elements` elements (a whole number of blocks) of `src` to f32.
void DequantizeToF32(DType dtype, const void* src, int64_t num_elements, float* dst);
// Converts f32 to `dtype` (a whole number of blocks; DTypeWritable). Q8_0 uses ggml's scale
// amax / 127; Q4_0 / Q4_1 / MXFP4 use ggml's reference quantizers.
void QuantizeFromF32(DType dtype, const float* src, int64_t num_elements, void* dst);

}  // namespace astr::model
