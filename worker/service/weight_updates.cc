#include "worker/service/weight_updates.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <new>
#include <set>
#include <sstream>

#include "common/base/clock.h"
#include "common/base/logging.h"
#include "common/model/model_file.h"
#include "worker/service/executor.h"
#include "worker/service/step_runner.h"

namespace astr {
namespace {

// The float dtypes an update may carry: model::ParseDType's names, or torch's.
StatusOr<model::DType> ParseUpdateDType(const std::string& name) {
  const std::string alias = name == "float32"    ? "f32"
                            : name == "float16"  ? "f16"
                            : name == "bfloat16" ? "bf16"
                                                 : name;
  auto dtype = model::ParseDType(alias);
  if (dtype.ok() && (*dtype == model::DType::kF32 || *dtype == model::DType::kF16 ||
                     *dtype == model::DType::kBF16)) {
    return *dtype;
  }
  return InvalidArgumentError("dtype '" + name + "': expected f32, f16 or bf16");
}

std::string Entry(int index, const std::string& name) {
  return "manifest.tensors[" + std::to_string(index) + "] '" + name + "'";
}

std::string Hex(uint64_t v) { return "0x" + model::ContentHashHex(v); }

std::string LowerDType(model::DType dtype) {
  std::string s(model::DTypeName(dtype));
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

WeightStager::WeightStager(const model::ModelConfig& config, WeightBuilder* builder)
    : config_(config), builder_(builder) {}

WeightStager::~WeightStager() {
  // A refused or broken update's bytes serve the next one.
  for (Pending& p : pending_) {
    if (p.tensor != nullptr && p.tensor.use_count() == 1) {
      ReceiveBuffers::Global().Put(std::move(p.tensor->data));
    }
    for (std::shared_ptr<UpdateTensor>& part : p.split) {
      if (part != nullptr && part.use_count() == 1) {
        ReceiveBuffers::Global().Put(std::move(part->data));
      }
    }
  }
}

Status WeightStager::Begin(const v1::WeightManifest& manifest) {
  if (begun_) return InvalidArgumentError("manifest: only the first message may carry one");
  begun_ = true;
  label_ = manifest.label();
  if (manifest.tensors().empty()) return InvalidArgumentError("manifest: no tensors");
  std::map<std::string, std::vector<int64_t>> expected;
  for (model::WeightSpec& w : model::ExpectedWeights(config_)) {
    expected.emplace(std::move(w.name), std::move(w.shape));
  }
  std::map<std::string, int> seen;
  for (int i = 0; i < manifest.tensors_size(); ++i) {
    const v1::TensorSpec& spec = manifest.tensors(i);
    std::string canonical = model::CanonicalFromHfName(config_.architecture, spec.name());
    // A fused tensor (Phi-3's qkv_proj, gate_up_proj) or transformers 5's stacked experts stand
    // for their parts, their rows stacked.
    std::vector<std::string> part_names, parts;
    std::vector<int64_t> part_rows, whole_shape;
    std::string layer;
    const model::FusedTensorNames* fused = nullptr;
    std::string rest;
    std::vector<model::TransposedExpertPart> tparts;
    const model::Architecture* arch = model::FindArchitecture(config_.architecture);
    if (arch != nullptr && arch->hf_experts_transposed &&
        model::SplitLayerName(spec.name(), "model.layers.", &layer, &rest) && layer.size() < 10 &&
        std::stoll(layer) < config_.num_layers && config_.LayerIsMoe(std::stoll(layer)) &&
        model::MatchTransposedExperts(config_, rest, &whole_shape, &tparts)) {
      // gpt-oss's stacked experts: each expert's parts gathered out of the x @ W form.
      canonical = spec.name();
      expected[canonical] = whole_shape;
      for (int64_t e = 0; e < config_.num_experts; ++e) {
        for (const auto& tp : tparts) {
          parts.push_back("layers." + layer + ".experts." + std::to_string(e) + "." + tp.part);
          part_rows.push_back(tp.shape[0]);
        }
      }
    } else if (model::MatchHfStackedExperts(config_, spec.name(), &layer, &part_names,
                                            &whole_shape)) {
      // (Its name of the router is a plain tensor.)
      canonical = part_names.size() == 1 ? part_names[0] : spec.name();
      if (part_names.size() == 1) part_names.clear();
    } else if (model::MatchFusedTensor(config_.architecture, spec.name(), /*gguf=*/false, &layer,
                                       &fused)) {
      canonical = "layers." + layer + "." + fused->hf;
      for (const std::string& part : fused->parts) {
        part_names.push_back("layers." + layer + "." + part);
      }
    }
    if (!part_names.empty()) {
      int64_t rows = 0, cols = 0;
      for (const std::string& name : part_names) {
        auto pt = expected.find(name);
        if (pt == expected.end() || pt->second.size() != 2) break;
        rows += pt->second[0], cols = pt->second[1];
        parts.push_back(pt->first);
        part_rows.push_back(pt->second[0]);
      }
      if (parts.size() == part_names.size()) {
        expected[canonical] = whole_shape.empty() ? std::vector<int64_t>{rows, cols} : whole_shape;
      }
    }
    auto it = canonical.empty() ? expected.end() : expected.find(canonical);
    if (it == expected.end()) {
      std::string why = "not a tensor of this " + config_.architecture + " model (" +
                        std::to_string(config_.num_layers) + " layers)";
      if (canonical == "lm_head" && config_.tie_word_embeddings) {
        why = "the model ties its output projection to model.embed_tokens.weight; push that";
      }
      return InvalidArgumentError(Entry(i, spec.name()) + ": " + why);
    }
    for (const std::string& name : parts.empty() ? std::vector<std::string>{canonical} : parts) {
      if (auto [prev, inserted] = seen.emplace(name, i); !inserted) {
        return InvalidArgumentError(Entry(i, spec.name()) + ": named twice (also tensors[" +
                                    std::to_string(prev->second) + "])");
      }
    }
    auto dtype = ParseUpdateDType(spec.dtype());
    if (!dtype.ok()) return InvalidArgumentError(Entry(i, spec.name()) + ": " +
                                                 std::string(dtype.status().message()));
    const std::vector<int64_t> shape(spec.shape().begin(), spec.shape().end());
    if (shape != it->second) {
      return InvalidArgumentError(Entry(i, spec.name()) + ": shape " + model::ShapeToString(shape) +
                                  ", the served model's is " + model::ShapeToString(it->second));
    }
    Pending& p = pending_.emplace_back();
    p.parts = std::move(parts);
    p.part_rows = std::move(part_rows);
    if (!tparts.empty()) {
      p.transposed = rest;
      p.transposed_parts = std::move(tparts);
    }
    p.tensor = std::make_shared<UpdateTensor>();
    UpdateTensor& t = *p.tensor;
    t.hf_name = spec.name();
    t.canonical = canonical;
    t.dtype = *dtype;
    t.shape = shape;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    ASTR_ASSIGN_OR_RETURN(t.bytes, model::DTypeByteSize(*dtype, n));
    t.half_to_interleaved = NeedsHalfToInterleaved(config_, canonical);
    t.norm_shift = model::HfNormShift(config_, canonical);
    p.has_checksum = spec.has_xxh64();
    p.checksum = spec.xxh64();
  }
  return OkStatus();
}

Status WeightStager::Add(const v1::WeightChunk& chunk) {
  return Add(chunk.tensor(), chunk.offset(), reinterpret_cast<const uint8_t*>(chunk.data().data()),
             chunk.data().size());
}

Status WeightStager::Add(int tensor, int64_t offset, const uint8_t* data, size_t size) {
  if (!begun_) return InvalidArgumentError("the first message must carry the manifest");
  if (tensor < 0 || tensor >= static_cast<int>(pending_.size())) {
    return InvalidArgumentError("chunk.tensor " + std::to_string(tensor) + " out of range [0, " +
                                std::to_string(pending_.size()) + ")");
  }
  Pending& p = pending_[static_cast<size_t>(tensor)];
  UpdateTensor& t = *p.tensor;
  if (offset < 0 || static_cast<uint64_t>(offset) != p.received) {
    return InvalidArgumentError("tensor '" + t.hf_name + "': chunk at offset " +
                                std::to_string(offset) + ", expected " +
                                std::to_string(p.received) + " (chunks of a tensor come in order)");
  }
  if (p.received + size > t.bytes) {
    return InvalidArgumentError("tensor '" + t.hf_name + "': chunk [" +
                                std::to_string(p.received) + ", " +
                                std::to_string(p.received + size) + ") runs past its " +
                                std::to_string(t.bytes) + " bytes");
  }
  if (!t.data) {
    if (builder_ != nullptr) builder_->AwaitRoom(t.bytes);
    t.data = ReceiveBuffers::Global().Take(t.bytes);
    if (!t.data) {
      return ResourceExhaustedError("tensor '" + t.hf_name + "': cannot allocate " +
                                    std::to_string(t.bytes) + " bytes");
    }
  }
  // Copied and hashed a piece at a time, the hash reading what the copy left in the cache.
  constexpr size_t kPiece = size_t{128} << 10;
  uint8_t* dst = t.data.get() + p.received;
  for (size_t off = 0; off < size; off += kPiece) {
    const size_t n = std::min(kPiece, size - off);
    std::memcpy(dst + off, data + off, n);
    p.hasher.Update(dst + off, n);
  }
  p.received += size;
  bytes_received_ += static_cast<int64_t>(size);
  if (p.received == t.bytes) return Complete(p);
  return OkStatus();
}

Status WeightStager::Complete(Pending& p) {
  UpdateTensor& t = *p.tensor;
  t.xxh64 = p.hasher.Digest();
  if (p.has_checksum && t.xxh64 != p.checksum) {
    return DataLossError("tensor '" + t.hf_name + "': xxh64 of the bytes received is " +
                         Hex(t.xxh64) + ", the manifest says " + Hex(p.checksum));
  }
  if (p.parts.empty()) return Deliver(p.tensor);
  // Fused or stacked: each part copied into a tensor of its own, which goes on as if pushed alone:
  // rows one after the other, or (gpt-oss's stacked experts) gathered out of the x @ W form.
  const bool transposed = !p.transposed.empty();
  int64_t elems = 1;
  for (int64_t d : t.shape) elems *= d;
  const size_t elem_bytes = t.bytes / static_cast<size_t>(elems);
  const int64_t cols = t.shape.back();
  const size_t per_expert = p.transposed_parts.size();
  size_t offset = 0;
  for (size_t k = 0; k < p.parts.size(); ++k) {
    auto part = std::make_shared<UpdateTensor>();
    part->hf_name = t.hf_name + " (" + p.parts[k] + (transposed ? ")" : " rows)");
    part->canonical = p.parts[k];
    part->dtype = t.dtype;
    part->shape = transposed ? p.transposed_parts[k % per_expert].shape
                             : std::vector<int64_t>{p.part_rows[k], cols};
    int64_t n = 1;
    for (int64_t d : part->shape) n *= d;
    part->bytes = elem_bytes * static_cast<size_t>(n);
    part->half_to_interleaved = NeedsHalfToInterleaved(config_, part->canonical);
    part->norm_shift = model::HfNormShift(config_, part->canonical);
    part->data = ReceiveBuffers::Global().Take(part->bytes);
    if (!part->data) {
      return ResourceExhaustedError("tensor '" + part->hf_name + "': cannot allocate " +
                                    std::to_string(part->bytes) + " bytes");
    }
    if (transposed) {
      model::CopyTransposedExpert(config_, p.transposed, k % per_expert,
                                  static_cast<int64_t>(k / per_expert), t.data.get(), elem_bytes,
                                  part->data.get());
    } else {
      std::memcpy(part->data.get(), t.data.get() + offset, part->bytes);
      offset += part->bytes;
    }
    model::ContentHasher64 h;
    h.Update(part->data.get(), part->bytes);
    part->xxh64 = h.Digest();
    ASTR_RETURN_IF_ERROR(Deliver(part));
    p.split.push_back(std::move(part));
  }
  ReceiveBuffers::Global().Put(std::move(t.data));
  return OkStatus();
}

Status WeightStager::Deliver(std::shared_ptr<UpdateTensor>& t) {
  if (builder_ == nullptr) return OkStatus();
  // The builder takes the bytes; what they were stays here.
  auto kept = std::make_shared<UpdateTensor>();
  kept->hf_name = t->hf_name;
  kept->canonical = t->canonical;
  kept->dtype = t->dtype;
  kept->shape = t->shape;
  kept->bytes = t->bytes;
  kept->xxh64 = t->xxh64;
  kept->half_to_interleaved = t->half_to_interleaved;
  kept->norm_shift = t->norm_shift;
  std::shared_ptr<UpdateTensor> full = std::move(t);
  t = std::move(kept);
  return builder_->Add(std::move(full));
}

StatusOr<UpdateTensors> WeightStager::Finish() {
  if (!begun_) return InvalidArgumentError("the update carried no manifest");
  UpdateTensors out;
  for (Pending& p : pending_) {
    UpdateTensor& t = *p.tensor;
    // Zero-byte tensors complete without a chunk.
    if (t.bytes == 0 && p.received == 0) ASTR_RETURN_IF_ERROR(Complete(p));
    if (p.received != t.bytes) {
      return InvalidArgumentError(
          "tensor '" + p.tensor->hf_name + "': received " + std::to_string(p.received) +
          " of its " + std::to_string(p.tensor->bytes) + " bytes (the stream ended early)");
    }
  }
  for (Pending& p : pending_) {
    if (!p.parts.empty()) {
      for (std::shared_ptr<UpdateTensor>& part : p.split) {
        const std::string canonical = part->canonical;
        out.emplace(canonical, std::shared_ptr<const UpdateTensor>(std::move(part)));
      }
      continue;
    }
    const std::string canonical = p.tensor->canonical;
    out.emplace(canonical, std::shared_ptr<const UpdateTensor>(std::move(p.tensor)));
  }
  pending_.clear();
  return out;
}

Status CheckSameModel(const model::ModelConfig& a, const model::ModelConfig& b,
                      const std::string& other_path) {
  std::ostringstream why;
  const auto differ = [&](const char* field, const auto& x, const auto& y) {
    if (x == y) return false;
    why << field << " " << x << " vs " << y;
    return true;
  };
  const bool d =
      differ("architecture", a.architecture, b.architecture) ||
      differ("vocab_size", a.vocab_size, b.vocab_size) ||
      differ("hidden_size", a.hidden_size, b.hidden_size) ||
      differ("intermediate_size", a.intermediate_size, b.intermediate_size) ||
      differ("num_layers", a.num_layers, b.num_layers) ||
      differ("num_heads", a.num_heads, b.num_heads) ||
      differ("num_kv_heads", a.num_kv_heads, b.num_kv_heads) ||
      differ("head_dim", a.head_dim, b.head_dim) || differ("rope_dim", a.rope_dim, b.rope_dim) ||
      differ("rms_norm_eps", a.rms_norm_eps, b.rms_norm_eps) ||
      differ("rope_theta", a.rope_theta, b.rope_theta) ||
      differ("rope_scaling.type", static_cast<int>(a.rope_scaling.type),
             static_cast<int>(b.rope_scaling.type)) ||
      differ("rope_scaling.factor", a.rope_scaling.factor, b.rope_scaling.factor) ||
      differ("rope_scaling.low_freq_factor", a.rope_scaling.low_freq_factor,
             b.rope_scaling.low_freq_factor) ||
      differ("rope_scaling.high_freq_factor", a.rope_scaling.high_freq_factor,
             b.rope_scaling.high_freq_factor) ||
      differ("rope_scaling.original_max_position", a.rope_scaling.original_max_position,
             b.rope_scaling.original_max_position) ||
      differ("rope_scaling.attention_factor", a.rope_scaling.attention_factor,
             b.rope_scaling.attention_factor) ||
      differ("rope_scaling.short_factor",
             a.rope_scaling.short_factor != b.rope_scaling.short_factor, false) ||
      differ("rope_scaling.long_factor", a.rope_scaling.long_factor != b.rope_scaling.long_factor,
             false) ||
      differ("qkv_bias", a.qkv_bias, b.qkv_bias) ||
      differ("qk_norm", static_cast<int>(a.qk_norm), static_cast<int>(b.qk_norm)) ||
      differ("gated_attention", a.gated_attention, b.gated_attention) ||
      differ("tie_word_embeddings", a.tie_word_embeddings, b.tie_word_embeddings) ||
      differ("sliding_window", a.sliding_window, b.sliding_window) ||
      differ("sliding_window_pattern", a.sliding_window_pattern, b.sliding_window_pattern) ||
      differ("rope_local_theta", a.rope_local_theta, b.rope_local_theta) ||
      differ("attn_scale", a.AttnScale(), b.AttnScale()) ||
      differ("embed_scale", a.embed_scale, b.embed_scale) ||
      differ("sandwich_norms", a.sandwich_norms, b.sandwich_norms) ||
      differ("mlp_activation", static_cast<int>(a.mlp_activation),
             static_cast<int>(b.mlp_activation)) ||
      differ("num_experts", a.num_experts, b.num_experts) ||
      differ("num_experts_per_tok", a.num_experts_per_tok, b.num_experts_per_tok) ||
      differ("moe_intermediate_size", a.moe_intermediate_size, b.moe_intermediate_size) ||
      differ("norm_topk_prob", a.norm_topk_prob, b.norm_topk_prob) ||
      differ("moe_layer_step", a.moe_layer_step, b.moe_layer_step) ||
      differ("dense_layers", a.dense_layers != b.dense_layers, false) ||
      differ("shared_expert_intermediate_size", a.shared_expert_intermediate_size,
             b.shared_expert_intermediate_size) ||
      differ("rope_scaling.beta_fast", a.rope_scaling.beta_fast, b.rope_scaling.beta_fast) ||
      differ("rope_scaling.beta_slow", a.rope_scaling.beta_slow, b.rope_scaling.beta_slow) ||
      differ("rope_scaling.truncate", a.rope_scaling.truncate, b.rope_scaling.truncate) ||
      differ("o_bias", a.o_bias, b.o_bias) || differ("attn_sinks", a.attn_sinks, b.attn_sinks) ||
      differ("swiglu_limit", a.swiglu_limit, b.swiglu_limit) ||
      differ("swiglu_alpha", a.swiglu_alpha, b.swiglu_alpha) ||
      differ("router_bias", a.router_bias, b.router_bias) ||
      differ("expert_bias", a.expert_bias, b.expert_bias) ||
      differ("router_sigmoid", a.router_sigmoid, b.router_sigmoid) ||
      differ("router_choice_bias", a.router_choice_bias, b.router_choice_bias) ||
      differ("router_groups", a.router_groups, b.router_groups) ||
      differ("router_topk_groups", a.router_topk_groups, b.router_topk_groups) ||
      differ("routed_scaling_factor", a.routed_scaling_factor, b.routed_scaling_factor) ||
      differ("shared_expert_gated", a.shared_expert_gated, b.shared_expert_gated);
  if (!d) return OkStatus();
  return FailedPreconditionError(other_path + " is not the served model: " + why.str() +
                                 " (served vs given)");
}

WeightUpdates::WeightUpdates(std::string model_path, model::ModelConfig config)
    : config_(std::move(config)) {
  served_.base_path = std::move(model_path);
}

WeightUpdates::~WeightUpdates() = default;

bool WeightUpdates::BeginStaging(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!staging_ended_.wait_for(lock, wait, [this] { return !staging_; })) return false;
  staging_ = true;
  return true;
}

void WeightUpdates::EndStaging() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    staging_ = false;
  }
  staging_ended_.notify_one();
}

int64_t WeightUpdates::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return served_.version;
}

WeightUpdates::Holding WeightUpdates::holding() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {.staged = staged_ != nullptr, .previous = previous_ != nullptr};
}

StatusOr<v1::StageWeightsResponse> WeightUpdates::StageTensors(
    UpdateTensors tensors, int64_t bytes, StepRunner& runner,
    std::unique_ptr<WeightBuilder> builder) {
  const auto start = std::chrono::steady_clock::now();
  Source source;
  {
    std::lock_guard<std::mutex> lock(mu_);
    source.base_path = served_.base_path;
    source.tensors = served_.tensors;
  }
  const int32_t count = static_cast<int32_t>(tensors.size());
  for (auto& [name, t] : tensors) source.tensors[name] = std::move(t);
  std::unique_ptr<WeightSet> weights;
  if (builder != nullptr) {
    // The builder packed the tensors as they came and takes the rest from the served set; the
    // checkpoint is opened only for what that set cannot give back exactly.
    const std::string base_path = source.base_path;
    auto open_base = [&]() -> StatusOr<std::shared_ptr<const model::ModelFile>> {
      auto file = model::ModelFile::Open(base_path);
      if (!file.ok()) {
        return FailedPreconditionError(
            "the update leaves tensors as they were, but the checkpoint they come from cannot be "
            "read again: " +
            std::string(file.status().message()));
      }
      return std::shared_ptr<const model::ModelFile>(std::move(*file));
    };
    ASTR_ASSIGN_OR_RETURN(weights, builder->Finish(open_base));
    builder.reset();
  } else {
    ASTR_ASSIGN_OR_RETURN(weights, BuildFromSource(source, runner));
  }
  auto staged = std::make_unique<Staged>();
  staged->source = std::move(source);
  staged->weights = std::move(weights);
  v1::StageWeightsResponse response;
  {
    std::lock_guard<std::mutex> lock(mu_);
    staged->id = next_staged_id_++;
    response.set_staged_id(staged->id);
    staged_ = std::move(staged);
  }
  response.set_tensors(count);
  response.set_bytes(bytes);
  response.set_prepare_ns(NanosSince(start));
  return response;
}

StatusOr<std::unique_ptr<WeightSet>> WeightUpdates::BuildFromSource(const Source& source,
                                                                    StepRunner& runner) const {
  // The checkpoint is opened only when the update leaves some of its tensors unreplaced.
  std::shared_ptr<const model::ModelFile> base;
  for (const model::WeightSpec& w : model::ExpectedWeights(config_)) {
    if (source.tensors.count(w.name) != 0) continue;
    auto file = model::ModelFile::Open(source.base_path);
    if (!file.ok()) {
      return FailedPreconditionError("the update leaves tensor '" +
                                     model::HfNameFromCanonical(config_.architecture, w.name) +
                                     "' as it was, but its checkpoint cannot be read again: " +
                                     std::string(file.status().message()));
    }
    base = std::move(*file);
    break;
  }
  WeightOverlay overlay(config_, base, source.tensors);
  return runner.PrepareWeights(overlay);
}

StatusOr<v1::StageWeightsResponse> WeightUpdates::StageFromDisk(const std::string& path,
                                                                StepRunner& runner) {
  const auto start = std::chrono::steady_clock::now();
  auto file = model::ModelFile::Open(path);
  if (!file.ok()) {
    return Status(file.status().code() == StatusCode::kNotFound ? StatusCode::kNotFound
                                                                : StatusCode::kInvalidArgument,
                  std::string(file.status().message()));
  }
  ASTR_RETURN_IF_ERROR(CheckSameModel(config_, (*file)->config(), path));
  ASTR_RETURN_IF_ERROR((*file)->ValidateWeights());
  const std::shared_ptr<const model::ModelFile> checkpoint = std::move(*file);
  // Read under the served config: a checkpoint in the other RoPE layout (a Hugging Face folder
  // under a llama served from GGUF) has its q/k rows permuted on load.
  WeightOverlay overlay(config_, checkpoint, {});
  ASTR_ASSIGN_OR_RETURN(std::unique_ptr<WeightSet> weights, runner.PrepareWeights(overlay));
  auto staged = std::make_unique<Staged>();
  staged->source.base_path = path;
  staged->weights = std::move(weights);
  v1::StageWeightsResponse response;
  int64_t bytes = 0;
  const std::vector<model::WeightSpec> expected = model::ExpectedWeights(config_);
  for (const model::WeightSpec& w : expected) {
    auto raw = checkpoint->Raw(w.name);
    if (raw.ok()) bytes += static_cast<int64_t>(raw->bytes);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    staged->id = next_staged_id_++;
    response.set_staged_id(staged->id);
    staged_ = std::move(staged);
  }
  response.set_tensors(static_cast<int32_t>(expected.size()));
  response.set_bytes(bytes);
  response.set_prepare_ns(NanosSince(start));
  return response;
}

StatusOr<int64_t> WeightUpdates::Control(const v1::ControlWeightsRequest& request,
                                         StepRunner& runner, WorkerExecutor& executor,
                                         std::vector<std::unique_ptr<WeightSet>>* dropped) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string id = std::to_string(request.staged_id());
  switch (request.action()) {
    case v1::ControlWeightsRequest::APPLY: {
      if (staged_ == nullptr || staged_->id != request.staged_id()) {
        return FailedPreconditionError("no staged update " + id + " to apply");
      }
      if (previous_ != nullptr) {
        return FailedPreconditionError("the previous update is not finished (FINISH or ROLLBACK)");
      }
      if (request.version() <= served_.version) {
        return InvalidArgumentError("version " + std::to_string(request.version()) +
                                    " is not above the served " +
                                    std::to_string(served_.version));
      }
      auto prev = std::make_unique<Staged>();
      prev->id = staged_->id;
      prev->source = std::move(served_);
      prev->weights = runner.SwapWeights(std::move(staged_->weights));
      served_ = std::move(staged_->source);
      served_.version = request.version();
      staged_.reset();
      previous_ = std::move(prev);
      executor.set_weight_version(served_.version);
      LOG(INFO) << "weights: serving version " << served_.version;
      return served_.version;
    }
    case v1::ControlWeightsRequest::ROLLBACK: {
      if (previous_ == nullptr || previous_->id != request.staged_id()) {
        return FailedPreconditionError("update " + id + " is not applied and unfinished");
      }
      dropped->push_back(runner.SwapWeights(std::move(previous_->weights)));
      served_ = std::move(previous_->source);
      previous_.reset();
      executor.set_weight_version(served_.version);
      LOG(WARNING) << "weights: rolled back to version " << served_.version;
      return served_.version;
    }
    case v1::ControlWeightsRequest::FINISH: {
      if (previous_ != nullptr && previous_->id == request.staged_id()) {
        dropped->push_back(std::move(previous_->weights));
        previous_.reset();
      }
      return served_.version;
    }
    case v1::ControlWeightsRequest::DISCARD: {
      if (staged_ != nullptr && (request.staged_id() == 0 || staged_->id == request.staged_id())) {
        dropped->push_back(std::move(staged_->weights));
        staged_.reset();
      }
      return served_.version;
    }
    default:
      return InvalidArgumentError("action: expected APPLY, ROLLBACK, FINISH or DISCARD");
  }
}

Status WeightUpdates::Checksums(const v1::GetWeightsChecksumRequest& request,
                                v1::GetWeightsChecksumResponse* response) const {
  std::vector<std::string> names;  // canonical
  const std::vector<model::WeightSpec> specs = model::ExpectedWeights(config_);
  if (request.names().empty()) {
    for (const model::WeightSpec& w : specs) names.push_back(w.name);
  } else {
    std::set<std::string> expected;
    for (const model::WeightSpec& w : specs) expected.insert(w.name);
    for (int i = 0; i < request.names_size(); ++i) {
      const std::string canonical =
          model::CanonicalFromHfName(config_.architecture, request.names(i));
      if (expected.count(canonical) == 0) {
        return InvalidArgumentError("names[" + std::to_string(i) + "] '" + request.names(i) +
                                    "': not a tensor of this model");
      }
      names.push_back(canonical);
    }
  }
  Source served;
  {
    std::lock_guard<std::mutex> lock(mu_);
    served.base_path = served_.base_path;
    served.tensors = served_.tensors;
    served.version = served_.version;
  }
  response->set_version(served.version);
  std::unique_ptr<model::ModelFile> base;
  for (const std::string& canonical : names) {
    v1::TensorChecksum* c = response->add_tensors();
    c->set_name(model::HfNameFromCanonical(config_.architecture, canonical));
    c->set_consistent(true);
    auto it = served.tensors.find(canonical);
    if (it != served.tensors.end()) {
      const UpdateTensor& t = *it->second;
      c->set_source("pushed");
      c->set_dtype(LowerDType(t.dtype));
      for (int64_t d : t.shape) c->add_shape(d);
      c->set_xxh64(t.xxh64);
      continue;
    }
    if (base == nullptr) {
      ASTR_ASSIGN_OR_RETURN(base, model::ModelFile::Open(served.base_path));
    }
    ASTR_ASSIGN_OR_RETURN(model::TensorView view, base->Raw(canonical));
    c->set_source("file");
    c->set_dtype(LowerDType(view.dtype));
    for (int64_t d : view.shape) c->add_shape(d);
    c->set_xxh64(model::ContentHash64(view.data, view.bytes));
  }
  return OkStatus();
}

StagingLease::~StagingLease() {
  updates->EndStaging();
  malloc_trim(0);
}

}  // namespace astr
