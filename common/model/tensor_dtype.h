// Element types of stored weight tensors (GGUF and safetensors) and their conversions to/from f32.
//
// Block-quantized types follow ggml's layouts exactly so that GGUF bytes can be read in place:
//   Q8_0: 32 elements in 34 bytes  {f16 d; int8 q[32]}          value = q * d
//   Q4_0: 32 elements in 18 bytes  {f16 d; uint8 q[16]}         value = (nibble - 8) * d
//   Q4_1: 32 elements in 20 bytes  {f16 d; f16 m; uint8 q[16]}  value = nibble * d + m
// In the Q4 types byte j holds element j in its low nibble and element j + 16 in its high nibble.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/base/status.h"

namespace astr::model {

enum class DType { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1 };

// "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1".
std::string_view DTypeName(DType dtype);
// Case-insensitive inverse of DTypeName ("bf16" -> kBF16).
StatusOr<DType> ParseDType(std::string_view name);
// Elements per block (1 for plain float types, 32 for the quantized ones).
int64_t DTypeBlockElements(DType dtype);
// Bytes per block.
int64_t DTypeBlockBytes(DType dtype);
// Bytes taken by `num_elements` elements; an error when the count is not a whole number of blocks
// or the size overflows.
StatusOr<uint64_t> DTypeByteSize(DType dtype, int64_t num_elements);

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);  // round to nearest even; overflow -> inf
float Bf16ToF32(uint16_t b);
uint16_t F32ToBf16(float f);  // round to nearest even; NaN stays NaN

// Converts `num_elements` elements (a whole number of blocks) of `src` to f32.
void DequantizeToF32(DType dtype, const void* src, int64_t num_elements, float* dst);
// Converts f32 to `dtype` (a whole number of blocks). Q8_0 uses ggml's scale amax / 127; Q4_0 /
// Q4_1 use ggml's reference quantizers.
void QuantizeFromF32(DType dtype, const float* src, int64_t num_elements, void* dst);

}  // namespace astr::model
