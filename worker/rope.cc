#include "worker/rope.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace astr {

namespace {

const model::RopeScaling kNoScaling{};

bool OwnLocalBase(const model::ModelConfig& c, bool local) {
  return local && c.rope_local_theta > 0.0;
}

// YaRN's correction range (transformers' find_correction_range, ggml_rope_yarn_corr_dims): the
// dims whose frequency turns beta_fast and beta_slow times over the pre-training context.
std::pair<double, double> YarnRange(const model::RopeScaling& s, double theta, int64_t dim) {
  auto corr_dim = [&](double rotations) {
    return static_cast<double>(dim) *
           std::log(static_cast<double>(s.original_max_position) / (rotations * 2.0 * M_PI)) /
           (2.0 * std::log(theta));
  };
  double low = corr_dim(s.beta_fast), high = corr_dim(s.beta_slow);
  if (s.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  return {low, high};
}

std::vector<float> InvFreq(const model::ModelConfig& c, bool local, bool long_factors) {
  const int64_t half = c.rope_dim / 2;
  std::vector<float> inv(half);
  const bool own_base = OwnLocalBase(c, local);
  const model::RopeScaling& s = own_base ? kNoScaling : c.rope_scaling;
  const double theta = own_base ? c.rope_local_theta : c.rope_theta;
  const auto [yarn_low, yarn_high] = s.type == model::RopeScaling::Type::kYarn
                                         ? YarnRange(s, theta, c.rope_dim)
                                         : std::pair<double, double>{0.0, 1.0};
  for (int64_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(theta, static_cast<double>(2 * i) / c.rope_dim);
    if (s.type == model::RopeScaling::Type::kLinear) {
      f /= s.factor;
    } else if (s.type == model::RopeScaling::Type::kLlama3) {
      // Meta's llama3 scaling: long wavelengths are divided by `factor`, short ones kept, and the
      // band between is interpolated smoothly.
      const double old_len = static_cast<double>(s.original_max_position);
      const double low_wavelen = old_len / s.low_freq_factor;
      const double high_wavelen = old_len / s.high_freq_factor;
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    } else if (s.type == model::RopeScaling::Type::kLongRope) {
      f /= (long_factors ? s.long_factor : s.short_factor)[i];
    } else if (s.type == model::RopeScaling::Type::kYarn) {
      // Below the ramp the frequency is kept (extrapolation), above it divided by the factor
      // (interpolation), linearly blended across it.
      const double ramp =
          std::clamp((static_cast<double>(i) - yarn_low) / (yarn_high - yarn_low), 0.0, 1.0);
      const double keep = 1.0 - ramp;
      f = f / s.factor * (1.0 - keep) + f * keep;
    }
    inv[i] = static_cast<float>(f);
  }
  return inv;
}

}  // namespace

std::vector<float> RopeInvFreq(const model::ModelConfig& c, bool local) {
  return InvFreq(c, local, /*long_factors=*/false);
}

bool RopeUsesLongFactors(const model::ModelConfig& c) {
  return c.rope_scaling.type == model::RopeScaling::Type::kLongRope;
}

std::vector<float> RopeInvFreqLong(const model::ModelConfig& c, bool local) {
  if (!RopeUsesLongFactors(c) || OwnLocalBase(c, local)) return {};
  return InvFreq(c, local, /*long_factors=*/true);
}

int32_t LongRopeOriginalContext(const model::ModelConfig& c) {
  return RopeUsesLongFactors(c) ? static_cast<int32_t>(c.rope_scaling.original_max_position) : 0;
}

float RopeCosSinScale(const model::ModelConfig& c, bool local) {
  const bool scaled =
      RopeUsesLongFactors(c) || c.rope_scaling.type == model::RopeScaling::Type::kYarn;
  if (!scaled || OwnLocalBase(c, local)) return 1.0f;
  return static_cast<float>(c.rope_scaling.attention_factor);
}

}  // namespace astr
