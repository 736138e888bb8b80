// `astr make-model`: writes a random-weight model (GGUF or HF folder) of any supported
// architecture, for tests and benchmarks. Weights are a pure function of (--seed, tensor, element),
// and tensors are generated and written in chunks so that a multi-GB model needs little memory.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/base/flags.h"
#include "common/model/gguf.h"
#include "common/model/model_config.h"
#include "common/model/model_file.h"
#include "common/model/safetensors.h"
#include "tools/command.h"

namespace astr {
namespace {

constexpr int64_t kChunkElements = int64_t{1} << 20;  // a multiple of every block size

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform weights with std `init_std` (half-width init_std * sqrt(3)); the default 0.02 keeps
// activations finite at any depth we build. Norms scale by ~1 so that the residual stream keeps its
// scale (their weights are ~1 - norm_offset: ~0 where the model adds 1, as Gemma's HF norms);
// biases are small.
void FillChunk(const std::string& name, uint64_t seed, uint64_t tensor_index, int64_t first,
               int64_t count, double init_std, double norm_offset, float* out) {
  const bool is_norm = name.find("norm") != std::string::npos;
  const bool is_bias = name.find("bias") != std::string::npos;
  const float half_width = is_norm   ? 0.05f
                           : is_bias ? 0.02f
                                     : static_cast<float>(init_std * 1.7320508075688772);
  const float center = is_norm ? static_cast<float>(1.0 - norm_offset) : 0.0f;
  const uint64_t key = SplitMix64(seed * 0x100000001B3ull + tensor_index);
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t r = SplitMix64(key ^ static_cast<uint64_t>(first + i) * 0xD1B54A32D192ED03ull);
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    out[i] = center + (2.0f * u - 1.0f) * half_width;
  }
}

// Types astr cannot quantize into (the ones QuantizeFromF32 does not write) get random blocks:
// random quant and sub-block scale bytes, and the block's f16 scale fields (at these offsets, in
// these proportions) scaled so that the values have std init_std. Not a quantization of anything,
// but every bit pattern a real file may hold.
struct RandomBlockFields {
  std::vector<std::pair<int, float>> f16_fields;  // byte offset, base value
};

RandomBlockFields BlockFields(model::DType dtype) {
  switch (dtype) {
    case model::DType::kQ5_0:
      return {{{0, 1.0f}}};
    case model::DType::kQ5_1:
      return {{{0, 1.0f}, {2, -16.0f}}};  // d, m: values centred on 0
    case model::DType::kQ2_K:
      return {{{80, 1.0f}, {82, 1.5f}}};  // d, dmin
    case model::DType::kQ3_K:
      return {{{108, 1.0f}}};
    case model::DType::kQ4_K:
      return {{{0, 1.0f}, {2, 7.5f}}};
    case model::DType::kQ5_K:
      return {{{0, 1.0f}, {2, 15.5f}}};
    case model::DType::kQ6_K:
      return {{{208, 1.0f}}};
    case model::DType::kIQ4_NL:
    case model::DType::kIQ4_XS:
      return {{{0, 1.0f}}};
    default:
      return {};
  }
}

// Random blocks [first_block, first_block + blocks) of a tensor, written to dst, with the f16
// fields at `scale` x their base values.
void RandomBlocks(model::DType dtype, uint64_t key, int64_t first_block, int64_t blocks,
                  float scale, uint8_t* dst) {
  const int64_t bytes = model::DTypeBlockBytes(dtype);
  const RandomBlockFields fields = BlockFields(dtype);
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* blk = dst + b * bytes;
    for (int64_t i = 0; i < bytes; i += 8) {
      const uint64_t r = SplitMix64(key ^ static_cast<uint64_t>((first_block + b) * bytes + i) *
                                              0xD1B54A32D192ED03ull);
      for (int64_t j = 0; j < 8 && i + j < bytes; ++j)
        blk[i + j] = static_cast<uint8_t>(r >> (8 * j));
    }
    for (const auto& [offset, base] : fields.f16_fields) {
      const uint16_t h = model::F32ToF16(base * scale);
      std::memcpy(blk + offset, &h, 2);
    }
  }
}

// The field scale that gives random blocks of `dtype` values with std `init_std` (measured on
// 256 blocks made with scale 1).
float RandomBlockScale(model::DType dtype, double init_std) {
  const int64_t blocks = 256, n = blocks * model::DTypeBlockElements(dtype);
  std::vector<uint8_t> bytes(blocks * model::DTypeBlockBytes(dtype));
  RandomBlocks(dtype, 12345, 0, blocks, 1.0f, bytes.data());
  std::vector<float> v(n);
  model::DequantizeToF32(dtype, bytes.data(), n, v.data());
  double sum = 0, sq = 0;
  for (float x : v) sum += x, sq += static_cast<double>(x) * x;
  const double var = sq / n - (sum / n) * (sum / n);
  return static_cast<float>(init_std / std::sqrt(var));
}

struct Options {
  std::string arch = "llama", out, format = "gguf", dtype, dtype_of, hidden_act = "silu";
  int64_t hidden = 64, layers = 2, heads = 4, kv_heads = 2, head_dim = 0, ffn = 128, vocab = 512;
  int64_t seed = 0, max_context_tokens = 2048, sliding_window = 0, sliding_window_pattern = 0;
  double rope_theta = 10000.0, rms_eps = 1e-5, init_std = 0.02, router_std = 0.0,
         attn_softcap = 50.0, final_softcap = 30.0, swiglu_limit = 7.0;
  bool tie = false, qk_norm = false, gated = false, norm_topk_prob = false;
  int64_t experts = 8, experts_per_tok = 2, moe_ffn = 0, moe_layer_step = 1, shared_ffn = 0;
  int64_t expert_groups = 1, topk_groups = 1, first_dense = 1;
  double routed_scaling = 1.0;
  bool attention_bias = false;
  std::string dense_layers;
};

StatusOr<model::ModelConfig> BuildConfig(const Options& o) {
  model::ModelConfig c;
  c.architecture = o.arch;
  c.vocab_size = o.vocab;
  c.hidden_size = o.hidden;
  c.intermediate_size = o.ffn;
  c.num_layers = o.layers;
  c.num_heads = o.heads;
  c.num_kv_heads = o.kv_heads;
  c.head_dim = o.head_dim > 0 ? o.head_dim : (o.heads > 0 ? o.hidden / o.heads : 0);
  c.rope_dim = c.head_dim;
  c.max_context_tokens = o.max_context_tokens;
  c.rms_norm_eps = o.rms_eps;
  c.rope_theta = o.rope_theta;
  c.tie_word_embeddings = o.tie;
  c.sliding_window = o.sliding_window;
  if (o.hidden_act == "gelu_pytorch_tanh") {
    c.mlp_activation = model::MlpActivation::kGeluTanh;
  } else if (o.hidden_act != "silu") {
    return InvalidArgumentError("--hidden-act must be silu or gelu_pytorch_tanh, not '" +
                                o.hidden_act + "'");
  }
  c.bos_token_id = o.vocab > 1 ? 1 : -1;
  if (o.vocab > 2) c.eos_token_ids = {2};
  if (o.arch == "llama" || o.arch == "mistral") {
    // GGUF llama stores q/k in interleaved order; an HF llama folder in half order.
    c.rope_layout = o.format == "gguf" ? model::RopeLayout::kInterleaved : model::RopeLayout::kHalf;
  } else if (o.arch == "qwen2") {
    c.qkv_bias = true;
  } else if (o.arch == "qwen3") {
    c.qk_norm = model::QkNorm::kBeforeRope;
  } else if (o.arch == "mixtral") {
    // Mistral's layer, every MLP a mixture of --experts of --ffn (HF only: GGUF Mixtral is llama).
    c.num_experts = o.experts;
    c.num_experts_per_tok = o.experts_per_tok;
    c.moe_intermediate_size = o.ffn;
    c.norm_topk_prob = true;
  } else if (o.arch == "qwen3_moe" || o.arch == "qwen2_moe") {
    if (o.arch == "qwen3_moe") {
      c.qk_norm = model::QkNorm::kBeforeRope;
    } else {
      c.qkv_bias = true;
      c.shared_expert_intermediate_size = o.shared_ffn > 0 ? o.shared_ffn : o.ffn;
    }
    c.num_experts = o.experts;
    c.num_experts_per_tok = o.experts_per_tok;
    c.moe_intermediate_size = o.moe_ffn > 0 ? o.moe_ffn : o.ffn;
    c.norm_topk_prob = o.norm_topk_prob;
    c.moe_layer_step = o.moe_layer_step;
    for (size_t b = 0, e; !o.dense_layers.empty() && b <= o.dense_layers.size(); b = e + 1) {
      e = o.dense_layers.find(',', b);
      if (e == std::string::npos) e = o.dense_layers.size();
      const std::string item = o.dense_layers.substr(b, e - b);
      char* end = nullptr;
      const long long l = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0') {
        return InvalidArgumentError("--dense-layers: '" + item + "' is not a layer index");
      }
      c.dense_layers.push_back(l);
    }
  } else if (o.arch == "glm4_moe") {
    // GLM-4.5's layer (common/model/arch/glm.cc): the first --first-dense layers dense (--ffn),
    // then 'experts' of --moe-ffn with sigmoid routing, a random choice bias, --expert-groups
    // groups of which --topk-groups stay, weights times --routed-scaling, ungated shared experts
    // (--shared-ffn, a multiple of --moe-ffn); partial rotary over half the head.
    c.qkv_bias = o.attention_bias;
    c.qk_norm = o.qk_norm ? model::QkNorm::kBeforeRope : model::QkNorm::kNone;
    c.rope_dim = c.head_dim / 2;
    c.num_experts = o.experts;
    c.num_experts_per_tok = o.experts_per_tok;
    c.moe_intermediate_size = o.moe_ffn > 0 ? o.moe_ffn : o.ffn;
    c.shared_expert_intermediate_size = o.shared_ffn;
    c.shared_expert_gated = false;
    c.norm_topk_prob = o.norm_topk_prob;
    c.router_sigmoid = c.router_choice_bias = true;
    c.router_groups = o.expert_groups;
    c.router_topk_groups = o.topk_groups;
    c.routed_scaling_factor = o.routed_scaling;
    for (int64_t l = 0; l < o.first_dense && l < c.num_layers; ++l) c.dense_layers.push_back(l);
  } else if (o.arch == "gpt_oss") {
    // gpt-oss's layer (common/model/arch/gpt_oss.cc): every MLP a mixture of --experts of --ffn
    // with biases, clamped SwiGLU, attention biases and sinks, sliding / global alternation.
    c.num_experts = o.experts;
    c.num_experts_per_tok = o.experts_per_tok;
    c.moe_intermediate_size = o.ffn;
    c.norm_topk_prob = true;
    c.qkv_bias = c.o_bias = c.attn_sinks = c.router_bias = c.expert_bias = true;
    c.mlp_activation = model::MlpActivation::kSwigluClamped;
    c.swiglu_limit = o.swiglu_limit;
    if (c.sliding_window == 0) c.sliding_window = 128;
    c.sliding_window_pattern = 2;
    // GptOssConfig's YaRN (factor 32 over a 4096-token pre-training context), with the correction
    // dims truncated as llama.cpp always does them (so the GGUF form holds the same model).
    c.rope_scaling.type = model::RopeScaling::Type::kYarn;
    c.rope_scaling.factor = 32.0;
    c.rope_scaling.original_max_position = 4096;
    c.rope_scaling.truncate = true;
    c.rope_scaling.attention_factor = 1.0 + 0.1 * std::log(c.rope_scaling.factor);
  } else if (o.arch == "autoregressive_lm") {
    c.rope_layout = model::RopeLayout::kInterleaved;
    c.qk_norm = o.qk_norm ? model::QkNorm::kAfterRope : model::QkNorm::kNone;
    c.gated_attention = o.gated;
  } else if (o.arch == "phi3") {
    // The LLaMA layer with fused qkv_proj / gate_up_proj tensors (FileTensors).
  } else if (o.arch == "gemma2" || o.arch == "gemma3") {
    // Gemma's layer (common/model/arch/gemma.cc), with query_pre_attn_scalar = head_dim; Gemma 3
    // with the local RoPE base llama.cpp assumes, Gemma 2 soft-capped.
    const bool gemma3 = o.arch == "gemma3";
    if (gemma3) c.qk_norm = model::QkNorm::kBeforeRope;
    c.sandwich_norms = true;
    c.embed_scale = std::sqrt(static_cast<double>(c.hidden_size));
    c.attn_scale = c.head_dim > 0 ? 1.0 / std::sqrt(static_cast<double>(c.head_dim)) : 0.0;
    c.mlp_activation = model::MlpActivation::kGeluTanh;
    if (c.sliding_window == 0) c.sliding_window = 512;
    c.sliding_window_pattern =
        o.sliding_window_pattern > 0 ? o.sliding_window_pattern : (gemma3 ? 6 : 2);
    if (gemma3) {
      c.rope_local_theta = 10000.0;
    } else {
      c.attn_softcap = o.attn_softcap;
      c.final_softcap = o.final_softcap;
    }
    c.norm_weight_offset = o.format == "hf" ? 1.0 : 0.0;  // llama.cpp's converter stores 1 + w
  } else {
    return InvalidArgumentError(
        "--arch must be llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, "
        "autoregressive_lm, gemma2, gemma3, phi3, gpt_oss or glm4_moe");
  }
  if (!(o.init_std > 0.0 && o.init_std <= 1.0)) {
    return InvalidArgumentError("--init-std must be in (0, 1]");
  }
  if (!(o.router_std >= 0.0 && o.router_std <= 8.0)) {
    return InvalidArgumentError("--router-std must be in [0, 8]");
  }
  ASTR_RETURN_IF_ERROR(c.Validate());
  return c;
}

// A minimal SentencePiece-style vocabulary: <unk> <s> </s>, byte tokens when there is room, then
// distinct placeholder pieces.
void AddGgufVocab(int64_t n, model::GgufWriter* w) {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  auto add = [&](std::string t, float score, model::TokenType type) {
    tokens.push_back(std::move(t));
    scores.push_back(score);
    types.push_back(static_cast<int32_t>(type));
  };
  const char* specials[] = {"<unk>", "<s>", "</s>"};
  const model::TokenType special_types[] = {model::TokenType::kUnknown, model::TokenType::kControl,
                                            model::TokenType::kControl};
  for (int i = 0; i < 3 && i < n; ++i) add(specials[i], 0.0f, special_types[i]);
  if (n >= 3 + 256) {
    char buf[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
      add(buf, 0.0f, model::TokenType::kByte);
    }
  }
  for (int64_t i = static_cast<int64_t>(tokens.size()); i < n; ++i) {
    add("\xE2\x96\x81t" + std::to_string(i), -static_cast<float>(i), model::TokenType::kNormal);
  }
  w->AddMetadata("tokenizer.ggml.model", model::GgufValue::String("llama"));
  w->AddMetadata("tokenizer.ggml.tokens", model::GgufValue::StringArray(tokens));
  w->AddMetadata("tokenizer.ggml.scores", model::GgufValue::F32Array(scores));
  w->AddMetadata("tokenizer.ggml.token_type", model::GgufValue::I32Array(types));
  w->AddMetadata("tokenizer.ggml.unknown_token_id", model::GgufValue::U32(0));
  if (n > 1) w->AddMetadata("tokenizer.ggml.bos_token_id", model::GgufValue::U32(1));
  if (n > 2) w->AddMetadata("tokenizer.ggml.eos_token_id", model::GgufValue::U32(2));
}

// GGUF keeps 1-D tensors in F32 (as llama.cpp does) and falls back to F16 where rows are not whole
// quantization blocks.
model::DType StoredDType(const model::WeightSpec& w, model::DType requested, bool gguf) {
  if (gguf && (w.shape.size() == 1 || w.name.ends_with(".shared_expert_gate"))) {
    return model::DType::kF32;
  }
  if (w.shape.back() % model::DTypeBlockElements(requested) != 0) return model::DType::kF16;
  return requested;
}

// A tensor as the file declares it, and the specs it holds: `count` consecutive ones from `first`,
// written one after the other, or (`transposed`) gathered as a gpt-oss-style HF checkpoint stacks
// a layer's experts (Architecture::hf_experts_transposed: `x @ W` form, gate and up interleaved).
struct FileTensor {
  std::string name;
  std::vector<int64_t> shape;
  model::DType dtype;
  size_t first = 0, count = 1;
  bool transposed = false;
};

// Spec t's values [first, first + count) as f32 (FillChunk with its std).
void SpecValues(const std::vector<model::WeightSpec>& specs, size_t t, uint64_t seed,
                double default_std, double router_std, double norm_offset, int64_t first,
                int64_t count, float* out) {
  const double init_std =
      specs[t].name.ends_with(".router") && router_std > 0.0 ? router_std : default_std;
  FillChunk(specs[t].name, seed, t, first, count, init_std, norm_offset, out);
}

// A transposed file tensor (FileTensor::transposed) in f32: its specs are every expert's gate then
// up part (gate_up_proj [E, h, 2f] / gate_up_proj_bias [E, 2f], element 2r of a row from gate
// row r, 2r + 1 from up's), or every expert's down part (down_proj [E, f, h] holds down^T;
// down_proj_bias [E, h] as it is).
std::vector<float> TransposedValues(const FileTensor& ft,
                                    const std::vector<model::WeightSpec>& specs, uint64_t seed,
                                    double default_std, double router_std, double norm_offset) {
  int64_t total = 1;
  for (int64_t d : ft.shape) total *= d;
  std::vector<float> out(static_cast<size_t>(total));
  const int64_t experts = ft.shape[0];
  const bool paired = ft.count == static_cast<size_t>(2 * experts);
  std::vector<float> v;
  for (size_t k = 0; k < ft.count; ++k) {
    const size_t t = ft.first + k;
    const std::vector<int64_t>& shape = specs[t].shape;  // [rows, cols] or [rows]
    const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
    v.resize(static_cast<size_t>(rows * cols));
    SpecValues(specs, t, seed, default_std, router_std, norm_offset, 0, rows * cols, v.data());
    const int64_t e = static_cast<int64_t>(k) % experts;
    const int64_t half = paired ? static_cast<int64_t>(k) / experts : 0;  // 0 gate, 1 up
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        int64_t at;
        if (paired && shape.size() == 2) {  // gate_up_proj [E, h = cols, 2f]
          at = (e * cols + c) * 2 * rows + 2 * r + half;
        } else if (paired) {  // gate_up_proj_bias [E, 2f]
          at = e * 2 * rows + 2 * r + half;
        } else if (shape.size() == 2) {  // down_proj [E, f = cols, h = rows]
          at = (e * cols + c) * rows + r;
        } else {  // down_proj_bias [E, h]
          at = e * rows + r;
        }
        out[static_cast<size_t>(at)] = v[static_cast<size_t>(r * cols + c)];
      }
    }
  }
  return out;
}

template <typename Writer>
Status StreamWeights(const std::vector<model::WeightSpec>& specs,
                     const std::vector<model::DType>& dtypes,
                     const std::vector<FileTensor>& file_tensors, uint64_t seed, double default_std,
                     double router_std, double norm_offset, Writer* w) {
  std::vector<float> f32(kChunkElements);
  std::vector<uint8_t> bytes;
  for (const FileTensor& ft : file_tensors) {
    if (ft.transposed) {  // small test models only: built whole
      const std::vector<float> v =
          TransposedValues(ft, specs, seed, default_std, router_std, norm_offset);
      ASTR_ASSIGN_OR_RETURN(uint64_t nbytes,
                            model::DTypeByteSize(ft.dtype, static_cast<int64_t>(v.size())));
      bytes.resize(nbytes);
      model::QuantizeFromF32(ft.dtype, v.data(), static_cast<int64_t>(v.size()), bytes.data());
      ASTR_RETURN_IF_ERROR(w->WriteTensorData(bytes.data(), nbytes));
      continue;
    }
    for (size_t t = ft.first; t < ft.first + ft.count; ++t) {
      int64_t n = 1;
      for (int64_t d : specs[t].shape) n *= d;
      const double init_std =
          specs[t].name.ends_with(".router") && router_std > 0.0 ? router_std : default_std;
      const bool random_blocks = !model::DTypeWritable(dtypes[t]);
      const float block_scale = random_blocks ? RandomBlockScale(dtypes[t], init_std) : 0.0f;
      const uint64_t key = SplitMix64(seed * 0x100000001B3ull + t);
      for (int64_t first = 0; first < n; first += kChunkElements) {
        const int64_t count = std::min(kChunkElements, n - first);
        ASTR_ASSIGN_OR_RETURN(uint64_t nbytes, model::DTypeByteSize(dtypes[t], count));
        bytes.resize(nbytes);
        if (random_blocks) {
          const int64_t block = model::DTypeBlockElements(dtypes[t]);
          RandomBlocks(dtypes[t], key, first / block, count / block, block_scale, bytes.data());
          ASTR_RETURN_IF_ERROR(w->WriteTensorData(bytes.data(), nbytes));
          continue;
        }
        SpecValues(specs, t, seed, default_std, router_std, norm_offset, first, count, f32.data());
        model::QuantizeFromF32(dtypes[t], f32.data(), count, bytes.data());
        ASTR_RETURN_IF_ERROR(w->WriteTensorData(bytes.data(), nbytes));
      }
    }
  }
  return w->Close();
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return InternalError(path + ": write failed");
  return OkStatus();
}

// The file's tensors: one per spec, but the parts an architecture fuses (Phi-3's q/k/v, gate/up:
// consecutive specs) declared as one tensor. StreamWeights writes the parts one after the other,
// which is the fused tensor's row order.
StatusOr<std::vector<FileTensor>> FileTensors(const model::ModelConfig& c,
                                              const std::vector<model::WeightSpec>& specs,
                                              const std::vector<model::DType>& dtypes, bool gguf) {
  const model::Architecture* arch = model::FindArchitecture(c.architecture);
  std::vector<FileTensor> out;
  for (size_t i = 0; i < specs.size();) {
    std::string layer, rest;
    const model::FusedTensorNames* fused = nullptr;
    const bool in_layer =
        arch != nullptr && model::SplitLayerName(specs[i].name, "layers.", &layer, &rest);
    if (in_layer) {
      for (const model::FusedTensorNames& f : arch->fused_names) {
        if (f.parts[0] == rest) fused = &f;
      }
    }
    // gpt-oss-style HF checkpoints stack a layer's experts in four tensors (gate with up, down,
    // and their biases likewise).
    if (!gguf && in_layer && arch->hf_experts_transposed && rest.starts_with("experts.0.")) {
      const std::string part = rest.substr(std::string("experts.0.").size());
      const bool paired = part == "gate_proj" || part == "gate_bias";
      const size_t n = static_cast<size_t>(c.num_experts) * (paired ? 2 : 1);
      const int64_t e_count = c.num_experts, f = c.moe_intermediate_size, h = c.hidden_size;
      const std::string p = "model.layers." + layer + ".mlp.experts.";
      FileTensor t;
      if (part == "gate_proj") {
        t = {p + "gate_up_proj", {e_count, h, 2 * f}, dtypes[i]};
      } else if (part == "down_proj") {
        t = {p + "down_proj", {e_count, f, h}, dtypes[i]};
      } else if (part == "gate_bias") {
        t = {p + "gate_up_proj_bias", {e_count, 2 * f}, dtypes[i]};
      } else if (part == "down_bias") {
        t = {p + "down_proj_bias", {e_count, h}, dtypes[i]};
      } else {
        return InternalError("expert tensors of layer " + layer + " are not in file order");
      }
      t.first = i;
      t.count = n;
      t.transposed = true;
      out.push_back(std::move(t));
      i += n;
      continue;
    }
    // GGUF stacks each part of a MoE layer's experts (ExpectedWeights lists them part by part).
    if (gguf && in_layer && rest.starts_with("experts.0.")) {
      const std::string part = rest.substr(std::string("experts.0.").size());
      const std::string prefix = "layers." + layer + ".experts.";
      for (int64_t e = 0; e < c.num_experts; ++e) {
        const size_t k = i + static_cast<size_t>(e);
        if (k >= specs.size() || specs[k].name != prefix + std::to_string(e) + "." + part) {
          return InternalError("expert tensors of layer " + layer + " are not consecutive");
        }
        if (dtypes[k] != dtypes[i]) {
          return InvalidArgumentError("--dtype-of: " + specs[k].name + " is stored stacked with " +
                                      specs[i].name + " in GGUF and takes its type");
        }
      }
      std::vector<int64_t> shape = {c.num_experts};
      shape.insert(shape.end(), specs[i].shape.begin(), specs[i].shape.end());
      out.push_back({model::GgufNameFromCanonical(c.architecture, specs[i].name), shape, dtypes[i],
                     i, static_cast<size_t>(c.num_experts)});
      i += static_cast<size_t>(c.num_experts);
      continue;
    }
    if (fused == nullptr) {
      const std::string name = gguf ? model::GgufNameFromCanonical(c.architecture, specs[i].name)
                                    : model::HfNameFromCanonical(c.architecture, specs[i].name);
      std::vector<int64_t> shape = specs[i].shape;
      // llama.cpp's converter writes the shared expert's gate (one row) 1-D.
      if (gguf && specs[i].name.ends_with(".shared_expert_gate")) shape = {shape.back()};
      out.push_back({name, shape, dtypes[i], i, 1});
      ++i;
      continue;
    }
    int64_t rows = 0;
    for (size_t p = 0; p < fused->parts.size(); ++p) {
      const size_t k = i + p;
      if (k >= specs.size() || specs[k].name != "layers." + layer + "." + fused->parts[p]) {
        return InternalError("fused tensor parts of layer " + layer + " are not consecutive");
      }
      if (dtypes[k] != dtypes[i]) {
        return InvalidArgumentError("--dtype-of: " + specs[k].name + " is stored fused with " +
                                    specs[i].name + " in " + c.architecture +
                                    " files and takes its type");
      }
      rows += specs[k].shape[0];
    }
    out.push_back(
        {(gguf ? "blk." : "model.layers.") + layer + "." + (gguf ? fused->gguf : fused->hf),
         {rows, specs[i].shape[1]},
         dtypes[i],
         i,
         fused->parts.size()});
    i += fused->parts.size();
  }
  return out;
}

Status MakeModel(const Options& o) {
  if (o.format != "gguf" && o.format != "hf")
    return InvalidArgumentError("--format must be gguf or hf");
  const bool gguf = o.format == "gguf";
  if (gguf && o.hidden_act != "silu") {
    return InvalidArgumentError(
        "--hidden-act: a GGUF llama / qwen2 / qwen3 has SiLU; use --format hf");
  }
  const bool gguf_arch = o.arch == "llama" || o.arch == "qwen2" || o.arch == "qwen2_moe" ||
                         o.arch == "qwen3" || o.arch == "qwen3_moe" || o.arch == "gemma2" ||
                         o.arch == "gemma3" || o.arch == "phi3" || o.arch == "gpt_oss" ||
                         o.arch == "glm4_moe";
  if (gguf && !gguf_arch) {
    return InvalidArgumentError(
        "--format gguf supports --arch llama, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma2, gemma3, "
        "phi3, gpt_oss, glm4_moe (not " +
        o.arch + "); use --format hf");
  }
  ASTR_ASSIGN_OR_RETURN(model::DType dtype,
                        model::ParseDType(o.dtype.empty() ? (gguf ? "f16" : "bf16") : o.dtype));
  if (!gguf && dtype != model::DType::kF32 && dtype != model::DType::kF16 &&
      dtype != model::DType::kBF16) {
    return InvalidArgumentError("--format hf stores f32, f16 or bf16, not " +
                                std::string(model::DTypeName(dtype)));
  }
  ASTR_ASSIGN_OR_RETURN(model::ModelConfig config, BuildConfig(o));
  const std::vector<model::WeightSpec> specs = model::ExpectedWeights(config);
  // --dtype-of NAME=TYPE,...: per-tensor types (the first NAME that the canonical name contains).
  std::vector<std::pair<std::string, model::DType>> overrides;
  for (size_t b = 0, e; !o.dtype_of.empty() && b <= o.dtype_of.size(); b = e + 1) {
    e = o.dtype_of.find(',', b);
    if (e == std::string::npos) e = o.dtype_of.size();
    const std::string item = o.dtype_of.substr(b, e - b);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgumentError("--dtype-of: '" + item + "' is not NAME=TYPE");
    }
    auto t = model::ParseDType(item.substr(eq + 1));
    if (!t.ok())
      return InvalidArgumentError("--dtype-of " + item + ": " + std::string(t.status().message()));
    if (!gguf) return InvalidArgumentError("--dtype-of needs --format gguf");
    overrides.push_back({item.substr(0, eq), *t});
  }
  std::vector<model::DType> dtypes;
  for (const model::WeightSpec& w : specs) {
    model::DType want = dtype;
    for (const auto& [name, t] : overrides) {
      if (w.name.find(name) != std::string::npos) {
        want = t;
        break;
      }
    }
    dtypes.push_back(StoredDType(w, want, gguf));
  }
  const uint64_t seed = static_cast<uint64_t>(o.seed);
  if (gguf) {
    model::GgufWriter w;
    ASTR_RETURN_IF_ERROR(model::AddGgufMetadata(config, &w));
    AddGgufVocab(config.vocab_size, &w);
    ASTR_ASSIGN_OR_RETURN(std::vector<FileTensor> file_tensors,
                          FileTensors(config, specs, dtypes, /*gguf=*/true));
    for (const FileTensor& t : file_tensors) w.AddTensor(t.name, t.shape, t.dtype);
    ASTR_RETURN_IF_ERROR(w.Open(o.out));
    return StreamWeights(specs, dtypes, file_tensors, seed, o.init_std, o.router_std,
                         config.norm_weight_offset, &w);
  }
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) return InvalidArgumentError(o.out + ": cannot create folder: " + ec.message());
  ASTR_ASSIGN_OR_RETURN(std::string config_json, model::ConfigToHfJson(config));
  ASTR_RETURN_IF_ERROR(WriteTextFile(o.out + "/config.json", config_json));
  ASTR_RETURN_IF_ERROR(
      WriteTextFile(o.out + "/generation_config.json", model::GenerationConfigJson(config)));
  model::SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  ASTR_ASSIGN_OR_RETURN(std::vector<FileTensor> file_tensors,
                        FileTensors(config, specs, dtypes, /*gguf=*/false));
  for (const FileTensor& t : file_tensors) w.AddTensor(t.name, t.shape, t.dtype);
  ASTR_RETURN_IF_ERROR(w.Open(o.out + "/model.safetensors"));
  return StreamWeights(specs, dtypes, file_tensors, seed, o.init_std, o.router_std,
                       config.norm_weight_offset, &w);
}

int RunMakeModel(int argc, const char* const* argv) {
  Options o;
  FlagSet fs(argv[0], "Write a random-weight model (deterministic from --seed).");
  fs.String(
      "arch", &o.arch,
      "llama | mistral | mixtral | qwen2 | qwen2_moe | qwen3 | qwen3_moe | autoregressive_lm | "
      "gemma2 | gemma3 | phi3 | gpt_oss | glm4_moe.");
  fs.String("out", &o.out, "Output: a .gguf file (--format gguf) or a folder (--format hf).", true);
  fs.String("format", &o.format,
            "gguf (llama, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma2, gemma3, phi3, gpt_oss, "
            "glm4_moe) or hf (every arch).");
  fs.String(
      "dtype", &o.dtype,
      "f32 | f16 | bf16; gguf also q8_0, q4_0, q4_1, mxfp4 (random weights quantized) and q5_0, "
      "q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs (random blocks whose values have std "
      "--init-std). 1-D tensors stay f32, and tensors whose rows are not whole blocks f16. "
      "Default: f16 for gguf, bf16 for hf.");
  fs.String("dtype-of", &o.dtype_of,
            "gguf: per-tensor types as NAME=TYPE,... where NAME is part of a canonical tensor "
            "name (e.g. v_proj=q6_k,down_proj=q6_k,lm_head=q6_k for a Q4_K_M-like mix; "
            "experts.=mxfp4 for gpt-oss's form); the "
            "first match wins, other tensors take --dtype.");
  fs.Int("hidden", &o.hidden, "Hidden size.");
  fs.Int("layers", &o.layers, "Decoder layers.");
  fs.Int("heads", &o.heads, "Attention heads.");
  fs.Int("kv-heads", &o.kv_heads, "Key/value heads (must divide --heads).");
  fs.Int("head-dim", &o.head_dim, "Head dim (0: hidden / heads).");
  fs.Int("ffn", &o.ffn, "MLP intermediate size.");
  fs.Int("vocab", &o.vocab, "Vocabulary size.");
  fs.Int("max-context-tokens", &o.max_context_tokens,
         "Context length in tokens (max_position_embeddings).");
  fs.Int("seed", &o.seed, "Random seed; the same seed gives the same weights.");
  fs.Double("rope-theta", &o.rope_theta, "RoPE base frequency.");
  fs.Double("init-std", &o.init_std,
            "Standard deviation of the random projection and embedding weights (uniform). Larger "
            "values make attention sharper and its effect on the logits larger (tests).");
  fs.Double("rms-eps", &o.rms_eps, "RMSNorm epsilon.");
  fs.Bool("tie", &o.tie, "Tie lm_head to the embedding (no lm_head tensor).");
  fs.Int("sliding-window", &o.sliding_window,
         "Sliding attention window in tokens (0: none; gemma2/3: 0 means 512; gpt_oss: 128).");
  fs.Int("sliding-window-pattern", &o.sliding_window_pattern,
         "gemma2/3: every N-th layer attends globally, the others slide (0: the model's own, 2 "
         "for gemma2 and 6 for gemma3, the only values GGUF can hold).");
  fs.Double("attn-softcap", &o.attn_softcap,
            "gemma2: attention scores soft-capped as c * tanh(s / c) (0: off).");
  fs.Double("final-softcap", &o.final_softcap,
            "gemma2: final logits soft-capped likewise (0: off).");
  fs.String("hidden-act", &o.hidden_act,
            "--format hf: the MLP's activation, config.json hidden_act: silu (SwiGLU) or "
            "gelu_pytorch_tanh (GeGLU).");
  fs.Int("experts", &o.experts,
         "qwen3_moe, qwen2_moe, mixtral, gpt_oss, glm4_moe: experts per MoE layer.");
  fs.Int("experts-per-tok", &o.experts_per_tok,
         "MoE architectures: experts each token is routed to.");
  fs.Int("moe-ffn", &o.moe_ffn,
         "qwen3_moe, qwen2_moe: each expert's intermediate size (0: --ffn, which the dense layers "
         "keep; mixtral's and gpt_oss's experts take --ffn).");
  fs.Int("shared-ffn", &o.shared_ffn,
         "qwen2_moe: the shared expert's intermediate size (0: --ffn); glm4_moe: the shared "
         "experts' (a multiple of --moe-ffn; 0: none).");
  fs.Double("router-std", &o.router_std,
            "MoE architectures: standard deviation of the random router weights (0: "
            "--init-std); larger values make routing decisive, as a trained router's is (tests).");
  fs.Bool("norm-topk-prob", &o.norm_topk_prob,
          "qwen3_moe, qwen2_moe: renormalize the chosen experts' weights to sum 1 (default on for "
          "qwen3_moe, as GGUF qwen3moe always does; off for qwen2_moe, as GGUF qwen2moe never "
          "does).");
  fs.Int("decoder-sparse-step", &o.moe_layer_step,
         "qwen3_moe, qwen2_moe: layer l is MoE when (l + 1) is a multiple of this (hf only for > "
         "1).");
  fs.String("dense-layers", &o.dense_layers,
            "qwen3_moe, qwen2_moe: comma-separated layers that keep a dense MLP (mlp_only_layers; "
            "hf only).");
  fs.Int("expert-groups", &o.expert_groups,
         "glm4_moe: expert groups (n_group) the router picks among.");
  fs.Int("topk-groups", &o.topk_groups, "glm4_moe: groups that stay per token (topk_group).");
  fs.Double(
      "routed-scaling", &o.routed_scaling,
      "glm4_moe: the chosen experts' weights are multiplied by this (routed_scaling_factor).");
  fs.Int("first-dense", &o.first_dense,
         "glm4_moe: the first N layers keep a dense MLP of --ffn (first_k_dense_replace).");
  fs.Bool("attention-bias", &o.attention_bias, "glm4_moe: biases on q, k and v (attention_bias).");
  fs.Double("swiglu-limit", &o.swiglu_limit,
            "gpt_oss: the clamped SwiGLU's limit (config.json swiglu_limit; GGUF holds 7 only).");
  fs.Bool("qk-norm", &o.qk_norm,
          "autoregressive_lm: q/k RMSNorm after RoPE (default on); glm4_moe: before RoPE "
          "(use_qk_norm, default off).");
  fs.Bool("gated-attention", &o.gated,
          "autoregressive_lm: sigmoid-gated attention output (default on).");
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  if ((o.arch == "qwen3_moe" || o.arch == "glm4_moe") && !fs.WasSet("norm-topk-prob")) {
    o.norm_topk_prob = true;
  }
  if (o.arch == "autoregressive_lm") {
    if (!fs.WasSet("qk-norm")) o.qk_norm = true;
    if (!fs.WasSet("gated-attention")) o.gated = true;
  }
  Status s = MakeModel(o);
  if (!s.ok()) {
    std::fprintf(stderr, "astr make-model: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("wrote %s\n", o.out.c_str());
  return 0;
}

}  // namespace

ASTR_REGISTER_COMMAND("make-model", "Write a random-weight model (GGUF or HF folder).",
                      RunMakeModel);

}  // namespace astr
