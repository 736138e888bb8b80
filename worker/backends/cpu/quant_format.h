// The CPU kernels' format (kernels/cpu/gemm.h QuantFormat) for a ggml block type: its layout
// (common/model/tensor_dtype.h QuantLayoutOf) and llama.cpp's activation type for it.
#pragma once

#include "common/model/tensor_dtype.h"
#include "kernels/cpu/gemm.h"

namespace astr {

// dtype must be a block type (QuantLayoutOf has a value).
inline cpu::QuantFormat QuantKernelFormat(model::DType dtype) {
  const model::QuantLayout l = *model::QuantLayoutOf(dtype);
  const cpu::ActQuant act = l.dot == model::DotType::kQ8_0   ? cpu::ActQuant::kQ8_0
                            : l.dot == model::DotType::kQ8_1 ? cpu::ActQuant::kQ8_1
                                                             : cpu::ActQuant::kQ8_K;
  cpu::QuantFormat f{l.bits, l.sub, l.has_min, l.offset, act, l.super};
  if (l.table != nullptr) {
    f.table = true;
    for (int i = 0; i < 16; ++i) f.values[i] = l.table[i];
  }
  return f;
}

}  // namespace astr
