// Mixture-of-experts routing of one token, written once for the CPU backend (cpu::RouteTopK) and
// the CUDA kernel (moe.cu), which differ only in their exp (std::exp / expf). Two scorings:
//
//   softmax (Qwen-MoE, Mixtral, gpt-oss): p = softmax(logits); the top_k largest p (ties: the
//     lower expert), weights p (divided by their sum when `normalize`);
//   sigmoid (DeepSeek V3, GLM-4.5; transformers' Glm4MoeTopkRouter): s = sigmoid(logits), the
//     choice c = s + choice_bias (e_score_correction_bias; none: s); with expert groups, each
//     group's score is the sum of its two largest c, the topk_group best groups stay and the other
//     groups' c become 0 (not -inf, as transformers masks them); the top_k largest c (ties: the
//     lower expert) are chosen, weighted by their s (divided by sum + 1e-20 when `normalize`).
//
// Then every weight is multiplied by `scale` (routed_scaling_factor).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ASTR_MOE_HD __host__ __device__
#else
#define ASTR_MOE_HD
#endif

namespace astr::moe {

struct RouteParams {
  int num_experts = 0;
  int top_k = 0;
  bool sigmoid = false;
  bool normalize = false;
  float scale = 1.0f;
  const float* choice_bias = nullptr;  // [num_experts] (sigmoid only) or null
  int groups = 1;                      // divides num_experts; at most 64
  int topk_groups = 1;
};

template <typename Exp>
ASTR_MOE_HD inline float RouteSigmoid(float x, Exp exp_fn) {
  return 1.0f / (1.0f + exp_fn(-x));
}

// Routes one row of logits [num_experts] into experts[top_k] and weights[top_k].
template <typename Exp>
ASTR_MOE_HD inline void RouteRow(const float* logits, const RouteParams& p, Exp exp_fn,
                                 int32_t* experts, float* weights) {
  const int n = p.num_experts, k = p.top_k;
  if (!p.sigmoid) {
    float max = logits[0];
    for (int i = 1; i < n; ++i) max = logits[i] > max ? logits[i] : max;
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) sum += exp_fn(logits[i] - max);
    float picked = 0.0f;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int i = 0; i < n; ++i) {
        bool taken = false;
        for (int q = 0; q < j; ++q) taken = taken || experts[q] == i;
        if (!taken && (best < 0 || logits[i] > logits[best])) best = i;
      }
      experts[j] = best;
      weights[j] = exp_fn(logits[best] - max) / sum;
      picked += weights[j];
    }
    for (int j = 0; j < k; ++j) {
      if (p.normalize) weights[j] /= picked;
      weights[j] *= p.scale;
    }
    return;
  }
  auto choice = [&](int i) {
    const float s = RouteSigmoid(logits[i], exp_fn);
    return p.choice_bias != nullptr ? s + p.choice_bias[i] : s;
  };
  // The groups that stay: the topk_groups of the largest sums of their two best choices.
  uint64_t kept = ~uint64_t{0};
  if (p.groups > 1) {
    const int size = n / p.groups;
    kept = 0;
    for (int r = 0; r < p.topk_groups; ++r) {
      int best_g = -1;
      float best_score = 0.0f;
      for (int g = 0; g < p.groups; ++g) {
        if (kept >> g & 1) continue;
        float a = -3.0e38f, b = -3.0e38f;  // the two largest choices of group g
        for (int i = g * size; i < (g + 1) * size; ++i) {
          const float c = choice(i);
          if (c > a) {
            b = a, a = c;
          } else if (c > b) {
            b = c;
          }
        }
        const float score = a + b;
        if (best_g < 0 || score > best_score) best_g = g, best_score = score;
      }
      kept |= uint64_t{1} << best_g;
    }
  }
  const int size = n / (p.groups > 1 ? p.groups : 1);
  auto masked = [&](int i) { return (kept >> (i / size) & 1) ? choice(i) : 0.0f; };
  float picked = 0.0f;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    float best_c = 0.0f;
    for (int i = 0; i < n; ++i) {
      bool taken = false;
      for (int q = 0; q < j; ++q) taken = taken || experts[q] == i;
      if (taken) continue;
      const float c = masked(i);
      if (best < 0 || c > best_c) best = i, best_c = c;
    }
    experts[j] = best;
    weights[j] = RouteSigmoid(logits[best], exp_fn);
    picked += weights[j];
  }
  for (int j = 0; j < k; ++j) {
    if (p.normalize) weights[j] /= picked + 1e-20f;
    weights[j] *= p.scale;
  }
}

}  // namespace astr::moe
