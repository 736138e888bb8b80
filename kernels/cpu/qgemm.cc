// Block-quantized weights (WeightType::kQuant): packing, the activations' int8 quantization and the
// GEMM driver. The tiles are in qgemm_{scalar,avx2,avx512vnni}.cc.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/base/half.h"
#include "common/base/logging.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/qgemm_kernels.h"

namespace astr::cpu {
namespace {

using internal::QuantActivations;
using internal::QuantKernelSet;

constexpr int64_t kPanel = PackedMatrix::kPanel;

const QuantKernelSet& Kernels(Isa isa, int64_t m) {
  if (isa >= Isa::kAvx512 && CpuHasAvx512Vnni()) {
    if (m >= internal::kAmxMinRows && CpuUsesAmx()) return internal::QuantKernelsAmx();
    return internal::QuantKernelsAvx512Vnni();
  }
  if (isa >= Isa::kAvx2) return internal::QuantKernelsAvx2();
  return internal::QuantKernelsScalar();
}

float RoundF16(float f) { return F16ToF32(F32ToF16(f)); }

float AbsMaxScalar(const float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

void HalfSumsScalar(const int8_t* q, int64_t blocks, int32_t* s) {
  for (int64_t b = 0; b < blocks; ++b) {
    int32_t half[2] = {0, 0};
    for (int64_t j = 0; j < 32; ++j) half[j / 16] += q[b * 32 + j];
    s[2 * b] = half[0];
    s[2 * b + 1] = half[1];
  }
}

void QuantizeSpanScalar(const float* x, int64_t n, float mul, int8_t* q) {
  for (int64_t j = 0; j < n; ++j) {
    q[j] = static_cast<int8_t>(std::clamp(static_cast<int>(std::nearbyint(x[j] * mul)), -127, 127));
  }
}

// Quantizes each row of x as `act` says (gemm.h), and fills the per-block sums and the scales'
// transposed copy (row i's scale of block b at dt[b * ldt + i]).
void QuantizeRows(const QuantKernelSet& ks, ActQuant act, const float* x, int64_t ldx, int64_t m,
                  int64_t k, int64_t k_blocks, int8_t* q, float* d, int32_t* s, float* sum16,
                  float* sum32, float* dt, int64_t ldt) {
  const internal::AbsMaxFn abs_max = ks.abs_max != nullptr ? ks.abs_max : AbsMaxScalar;
  const internal::QuantizeSpanFn quantize =
      ks.quantize_span != nullptr ? ks.quantize_span : QuantizeSpanScalar;
  const internal::HalfSumsFn half_sums = ks.half_sums != nullptr ? ks.half_sums : HalfSumsScalar;
  const int64_t kp = k_blocks * 32;
  const int64_t group = act == ActQuant::kQ8_K ? 256 : 32;
  for (int64_t i = 0; i < m; ++i) {
    const float* xr = x + i * ldx;
    int8_t* qr = q + i * kp;
    float* dr = d + i * k_blocks;
    if (ks.quantize_row32 != nullptr && act != ActQuant::kQ8_K) {
      ks.quantize_row32(xr, k, k_blocks, act == ActQuant::kQ8_1, qr, dr, s + i * k_blocks * 2,
                        sum16 + i * k_blocks * 2, sum32 + i * k_blocks, dt + i, ldt);
      continue;
    }
    for (int64_t g0 = 0; g0 < kp; g0 += group) {
      const int64_t g1 = std::min(kp, g0 + group), x1 = std::min(k, g1);
      const float amax = x1 > g0 ? abs_max(xr + g0, x1 - g0) : 0.0f;
      float scale = 0.0f, mul = 0.0f;
      if (act == ActQuant::kQ8_K) {
        if (amax != 0.0f) {
          float max = 0.0f;  // the first element of largest |x|
          for (int64_t j = g0; j < x1; ++j) {
            if (std::fabs(xr[j]) == amax) {
              max = xr[j];
              break;
            }
          }
          mul = -127.0f / max;
          scale = 1.0f / mul;
        }
      } else {
        scale = RoundF16(amax / 127.0f);
        mul = amax != 0.0f ? 127.0f / amax : 0.0f;
      }
      if (x1 > g0) quantize(xr + g0, x1 - g0, mul, qr + g0);
      for (int64_t j = std::max(x1, g0); j < g1; ++j) qr[j] = 0;
      for (int64_t b = g0 / 32; b < g1 / 32; ++b) dr[b] = scale;
    }
    int32_t* sr = s + i * k_blocks * 2;
    half_sums(qr, k_blocks, sr);
    for (int64_t b = 0; b < k_blocks; ++b) {
      const int32_t half[2] = {sr[2 * b], sr[2 * b + 1]};
      sum16[(i * k_blocks + b) * 2] = dr[b] * static_cast<float>(half[0]);
      sum16[(i * k_blocks + b) * 2 + 1] = dr[b] * static_cast<float>(half[1]);
      const float whole = dr[b] * static_cast<float>(half[0] + half[1]);
      sum32[i * k_blocks + b] = act == ActQuant::kQ8_1 ? RoundF16(whole) : whole;
      dt[b * ldt + i] = dr[b];
    }
  }
}

}  // namespace

int64_t PackedMatrix::block_bytes() const {
  if (type_ != WeightType::kQuant) return 0;
  const int64_t nh = quant_.sub == 16 ? 2 : 1;
  const int64_t scale_bytes = quant_.super ? 1 : 2;
  return internal::QuantBlockQuantBytes(quant_.bits) +
         nh * kPanel * scale_bytes * (quant_.has_min ? 2 : 1);
}

int64_t PackedMatrix::unit_header_bytes() const {
  return type_ == WeightType::kQuant ? internal::QuantUnitHeaderBytes(quant_) : 0;
}

PackedMatrix PackedMatrix::FromQuantRows(int64_t n, int64_t k, const QuantFormat& fmt,
                                         const QuantRowDecoder& decode, ThreadPool* pool) {
  CHECK(fmt.bits == 4 || fmt.bits == 6 || fmt.bits == 8) << "quant bits " << fmt.bits;
  CHECK(fmt.sub == 16 || fmt.sub == 32) << "quant sub-block " << fmt.sub;
  CHECK(k % (fmt.super ? 256 : fmt.sub) == 0)
      << "k " << k << " is not a multiple of " << (fmt.super ? 256 : fmt.sub);
  CHECK(fmt.has_min ? fmt.offset == 0 : fmt.offset >= 0 && fmt.offset <= 255);
  CHECK(fmt.bits != 8 || (fmt.offset == 128 && !fmt.has_min))
      << "8-bit quants must be offset-128 signed values";
  CHECK(!fmt.table || (fmt.bits == 4 && fmt.offset == 128 && !fmt.has_min))
      << "table quants are 4-bit indices of offset-128 values";
  PackedMatrix pm(n, k, WeightType::kQuant, fmt);
  if (pm.bytes_ == 0) return pm;
  const int64_t nb = pm.k_blocks(), kp = nb * 32, subs = kp / fmt.sub, supers = kp / 256;
  const int64_t nh = fmt.sub == 16 ? 2 : 1;
  const int64_t qbytes = internal::QuantBlockQuantBytes(fmt.bits);
  const int64_t scale_bytes = fmt.super ? 1 : 2;
  const int max_q = fmt.bits == 4 ? 15 : fmt.bits == 6 ? 63 : 255;
  ParallelFor(pool, pm.panels(), 1, [&](int64_t p0, int64_t p1) {
    std::vector<uint8_t> q(kPanel * kp);
    std::vector<float> scale(kPanel * subs), min(kPanel * subs);
    std::vector<float> d(kPanel * supers), dmin(kPanel * supers);
    std::vector<int8_t> sc(kPanel * subs), m(kPanel * subs);
    for (int64_t p = p0; p < p1; ++p) {
      std::fill(q.begin(), q.end(), 0);
      std::fill(scale.begin(), scale.end(), 0.0f);
      std::fill(min.begin(), min.end(), 0.0f);
      std::fill(d.begin(), d.end(), 0.0f);
      std::fill(dmin.begin(), dmin.end(), 0.0f);
      std::fill(sc.begin(), sc.end(), 0);
      std::fill(m.begin(), m.end(), 0);
      const int64_t rows = std::min(kPanel, n - p * kPanel);
      for (int64_t r = 0; r < rows; ++r) {
        QuantRowOut out{q.data() + r * kp, scale.data() + r * subs,
                        fmt.has_min ? min.data() + r * subs : nullptr};
        if (fmt.super) {
          out.d = d.data() + r * supers;
          out.sc = sc.data() + r * subs;
          if (fmt.has_min) out.dmin = dmin.data() + r * supers, out.m = m.data() + r * subs;
        }
        decode(p * kPanel + r, out);
        for (int64_t j = 0; j < k; ++j) {
          CHECK_LE(q[r * kp + j], max_q) << "quant out of range at row " << p * kPanel + r;
        }
        if (fmt.super) {  // the factors must be f16 values, and make the decoder's scales
          for (int64_t u = 0; u < supers; ++u) {
            CHECK_EQ(RoundF16(d[r * supers + u]), d[r * supers + u]) << "row " << p * kPanel + r;
            CHECK_EQ(RoundF16(dmin[r * supers + u]), dmin[r * supers + u]);
          }
          for (int64_t s = 0; s < k / fmt.sub; ++s) {
            const int64_t u = s * fmt.sub / 256;
            CHECK_EQ(d[r * supers + u] * sc[r * subs + s], scale[r * subs + s])
                << "scale of sub-block " << s << " of row " << p * kPanel + r;
            if (fmt.has_min) CHECK_EQ(dmin[r * supers + u] * m[r * subs + s], min[r * subs + s]);
          }
        }
      }
      uint8_t* panel = static_cast<uint8_t*>(pm.data_.get()) + p * pm.panel_stride();
      for (int64_t b = 0; b < nb; ++b) {
        const internal::QuantBlockAt at =
            internal::LocateQuantBlock(panel, b, pm.block_bytes(), fmt);
        uint8_t* blk = const_cast<uint8_t*>(at.block);
        if (fmt.super && b % 8 == 0) {
          uint8_t* header = const_cast<uint8_t*>(at.header);
          for (int64_t r = 0; r < kPanel; ++r) {
            const uint16_t dh = F32ToF16(d[r * supers + b / 8]);
            std::memcpy(header + r * 2, &dh, 2);
            if (fmt.has_min) {
              const uint16_t mh = F32ToF16(dmin[r * supers + b / 8]);
              std::memcpy(header + (kPanel + r) * 2, &mh, 2);
            }
          }
        }
        for (int64_t r = 0; r < kPanel; ++r) {
          const uint8_t* qr = q.data() + r * kp + b * 32;
          for (int t = 0; t < 4; ++t) {
            if (fmt.bits == 8) {
              for (int g = 0; g < 8; ++g) blk[g * 64 + r * 4 + t] = qr[4 * g + t] ^ 0x80;
              continue;
            }
            for (int v = 0; v < 4; ++v) {
              blk[v * 64 + r * 4 + t] =
                  static_cast<uint8_t>((qr[4 * v + t] & 15) | (qr[4 * (v + 4) + t] & 15) << 4);
            }
            if (fmt.bits == 6) {  // the high 2 bits: vector g / 4, bits 2 * (g % 4)
              for (int hv = 0; hv < 2; ++hv) {
                uint8_t bits = 0;
                for (int j = 0; j < 4; ++j)
                  bits |= static_cast<uint8_t>((qr[4 * (4 * hv + j) + t] >> 4) << (2 * j));
                blk[256 + hv * 64 + r * 4 + t] = bits;
              }
            }
          }
          uint8_t* scales = blk + qbytes;
          for (int64_t h = 0; h < nh; ++h) {
            const int64_t sidx = r * subs + b * nh + h;
            uint8_t* s_at = scales + (h * kPanel + r) * scale_bytes;
            uint8_t* m_at = scales + ((nh + h) * kPanel + r) * scale_bytes;
            if (fmt.super) {
              std::memcpy(s_at, &sc[sidx], 1);
              if (fmt.has_min) std::memcpy(m_at, &m[sidx], 1);
              continue;
            }
            const uint16_t sh = F32ToF16(scale[sidx]);
            std::memcpy(s_at, &sh, 2);
            if (fmt.has_min) {
              const uint16_t mh = F32ToF16(min[sidx]);
              std::memcpy(m_at, &mh, 2);
            }
          }
        }
      }
    }
  });
  return pm;
}

void PackedMatrix::UnpackQuantRow(int64_t row, float* out) const {
  const QuantFormat& f = quant_;
  const int64_t pr = row % kPanel;
  const uint8_t* panel = static_cast<const uint8_t*>(data_.get()) + (row / kPanel) * panel_stride();
  const int64_t nh = f.sub == 16 ? 2 : 1;
  const int64_t qbytes = internal::QuantBlockQuantBytes(f.bits);
  const int64_t scale_bytes = f.super ? 1 : 2;
  auto f16_at = [](const uint8_t* at) {
    uint16_t h;
    std::memcpy(&h, at, 2);
    return F16ToF32(h);
  };
  float d = 0.0f, dmin = 0.0f;
  for (int64_t b = 0; b < k_blocks(); ++b) {
    const internal::QuantBlockAt at = internal::LocateQuantBlock(panel, b, block_bytes(), f);
    const uint8_t* blk = at.block;
    if (f.super && b % 8 == 0) {
      d = f16_at(at.header + pr * 2);
      if (f.has_min) dmin = f16_at(at.header + (kPanel + pr) * 2);
    }
    const uint8_t* scales = blk + qbytes;
    for (int64_t h = 0; h < nh; ++h) {
      const uint8_t* s_at = scales + (h * kPanel + pr) * scale_bytes;
      const uint8_t* m_at = scales + ((nh + h) * kPanel + pr) * scale_bytes;
      float scale, min = 0.0f;
      if (f.super) {
        scale = d * static_cast<float>(static_cast<int8_t>(*s_at));
        if (f.has_min) min = dmin * static_cast<float>(static_cast<int8_t>(*m_at));
      } else {
        scale = f16_at(s_at);
        if (f.has_min) min = f16_at(m_at);
      }
      for (int64_t j = h * f.sub; j < (h + 1) * f.sub && j < 32; ++j) {
        const int64_t kk = b * 32 + j;
        if (kk >= k_) break;
        const int g = static_cast<int>(j / 4), t = static_cast<int>(j % 4);
        int q;
        if (f.bits == 8) {
          q = blk[g * 64 + pr * 4 + t] ^ 0x80;
        } else {
          const uint8_t lo = blk[(g % 4) * 64 + pr * 4 + t];
          q = g < 4 ? lo & 15 : lo >> 4;
          if (f.table) q = f.values[q];
          if (f.bits == 6) q |= ((blk[256 + (g / 4) * 64 + pr * 4 + t] >> (2 * (g % 4))) & 3) << 4;
        }
        out[kk] = f.has_min ? scale * static_cast<float>(q) + min
                            : scale * static_cast<float>(q - f.offset);
      }
    }
  }
}

namespace internal {

void QuantGemmIsa(Isa isa, const float* x, int64_t ldx, int64_t m, const PackedMatrix& w, float* y,
                  int64_t ldy, bool accumulate, ThreadPool* pool) {
  QuantGemmWith(Kernels(isa, m), x, ldx, m, w, y, ldy, accumulate, pool);
}

void QuantGemmWith(const QuantKernelSet& ks, const float* x, int64_t ldx, int64_t m,
                   const PackedMatrix& w, float* y, int64_t ldy, bool accumulate,
                   ThreadPool* pool) {
  const int64_t nb = w.k_blocks();
  // Grows only when a call needs more than any earlier one on this thread.
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d;
  thread_local std::vector<int32_t> s;
  thread_local std::vector<float> sum16, sum32, dt;
  if (q.size() < static_cast<size_t>(m * nb * 32)) q.resize(m * nb * 32);
  if (d.size() < static_cast<size_t>(m * nb)) {
    d.resize(m * nb), sum32.resize(m * nb), dt.resize(m * nb);
  }
  if (s.size() < static_cast<size_t>(m * nb * 2)) s.resize(m * nb * 2), sum16.resize(m * nb * 2);
  // Rows are quantized on the pool too (each row's result is the same whichever thread does it).
  // The buffers are this thread's: the lambda takes their addresses, not the thread_locals.
  int8_t* const qp = q.data();
  float* const dp = d.data();
  int32_t* const sp = s.data();
  float* const s16p = sum16.data();
  float* const s32p = sum32.data();
  float* const dtp = dt.data();
  const ActQuant act = w.quant().act;
  const int64_t k = w.k();
  ParallelFor(pool, m, 1, [=, &ks](int64_t r0, int64_t r1) {
    QuantizeRows(ks, act, x + r0 * ldx, ldx, r1 - r0, k, nb, qp + r0 * nb * 32, dp + r0 * nb,
                 sp + r0 * nb * 2, s16p + r0 * nb * 2, s32p + r0 * nb, dtp + r0, m);
  });
  static std::atomic<uint64_t> calls{0};
  const QuantActivations xa{qp, dp, sp, s16p, s32p, nb, dtp, m, ++calls};
  const int bits = internal::QuantBitsIndex(internal::QuantKernelBits(w.quant()));
  const int64_t np = m == 1 && ks.single_row_panels > 0 ? ks.single_row_panels : ks.panels_per_tile;
  SplitGemm(pool, m, w.panels(), np, m * w.n() * w.k(),
            [&](int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
              const int64_t row_tiles = (r1 - r0 + ks.max_rows - 1) / ks.max_rows;
              for (int64_t p = p0; p < p1; p += np) {
                const int64_t tile_np = std::min(np, p1 - p);
                const int64_t col = p * kPanel;
                const int64_t ncols = std::min(tile_np * kPanel, w.n() - col);
                // With several row tiles, the first reads the panels from memory and the others
                // from the cache: meanwhile, the next panels are prefetched a share per row tile,
                // so that the next first pass finds them in L2 instead of waiting on each line.
                const char* next = nullptr;
                int64_t next_bytes = 0;
                if (row_tiles > 1 && p + np < p1) {
                  next = reinterpret_cast<const char*>(w.quant_panel(p + np));
                  next_bytes = std::min(np, p1 - p - np) * w.panel_stride();
                }
                int64_t tile = 0;
                for (int64_t r = r0; r < r1; r += ks.max_rows, ++tile) {
                  if (next != nullptr) {
                    const int64_t from = next_bytes * tile / row_tiles;
                    const int64_t to = next_bytes * (tile + 1) / row_tiles;
                    for (int64_t b = from & ~int64_t{63}; b < to; b += 64) {
                      __builtin_prefetch(next + b, 0, 2);
                    }
                  }
                  const int64_t rows = std::min<int64_t>(ks.max_rows, r1 - r);
                  ks.kernels[bits][rows - 1][tile_np - 1](
                      xa, r, w.quant_panel(p), w.panel_stride(), w.block_bytes(), w.quant(),
                      y + r * ldy + col, ldy, ncols, accumulate);
                }
              }
            });
}

}  // namespace internal
}  // namespace astr::cpu
