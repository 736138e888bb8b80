#include "kernels/cpu/gemm.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "common/base/half.h"
#include "common/base/logging.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/qgemm_kernels.h"

namespace astr::cpu {
namespace {

using internal::KernelSet;
using internal::SplitGemm;

// Below this many multiply-adds a GEMM runs on the calling thread: waking a worker costs more.
constexpr int64_t kMinParallelMacs = int64_t{1} << 15;

const KernelSet& Kernels(Isa isa, WeightType type, int64_t m) {
  switch (isa) {
    case Isa::kAvx512Bf16:
      return internal::GemmKernelsAvx512Bf16(type);
    case Isa::kAvx512:
      return internal::GemmKernelsAvx512(type, m);
    case Isa::kAvx2:
      return internal::GemmKernelsAvx2(type);
    case Isa::kScalar:
      break;
  }
  return internal::GemmKernelsScalar(type);
}

// Rows [row_begin, row_end) x panels [panel_begin, panel_end). For each group of panels, the row
// blocks run back to back so the group's weights (np * k * 64 bytes) are read from DRAM once and
// re-read from L2 by the later row blocks.
void RunTiles(const KernelSet& ks, const void* x, int64_t ldx, int64_t row_begin, int64_t row_end,
              const PackedMatrix& w, int64_t panel_begin, int64_t panel_end, float* y, int64_t ldy,
              bool accumulate) {
  const size_t x_elem = ks.x_bf16 ? sizeof(uint16_t) : sizeof(float);
  const int64_t np = ks.panels_per_tile;
  for (int64_t p = panel_begin; p < panel_end; p += np) {
    const int64_t tile_np = std::min(np, panel_end - p);
    const int64_t col = p * PackedMatrix::kPanel;
    const int64_t ncols = std::min(tile_np * PackedMatrix::kPanel, w.n() - col);
    for (int64_t r = row_begin; r < row_end; r += ks.max_rows) {
      const int64_t rows = std::min<int64_t>(ks.max_rows, row_end - r);
      const auto* xr = static_cast<const char*>(x) + r * ldx * x_elem;
      ks.kernels[rows - 1][tile_np - 1](xr, ldx, w.panel(p), w.panel_stride(), w.k(),
                                        y + r * ldy + col, ldy, ncols, accumulate);
    }
  }
}

}  // namespace

void PackedMatrix::AlignedFree::operator()(void* p) const { std::free(p); }

PackedMatrix::PackedMatrix(int64_t n, int64_t k, WeightType type, QuantFormat quant,
                           PackedMatrix* reuse)
    : n_(n), k_(k), type_(type), quant_(quant) {
  const size_t elem = type == WeightType::kF32    ? sizeof(float)
                      : type == WeightType::kBF16 ? sizeof(uint16_t)
                                                  : 1;
  bytes_ = static_cast<size_t>(panels() * panel_stride()) * elem;
  if (bytes_ == 0) return;
  if (reuse != nullptr && reuse->data_ != nullptr && SameLayout(*reuse)) {
    data_ = std::move(reuse->data_);
    *reuse = PackedMatrix();
    return;
  }
  // Matrices of 2 MiB and more start on a 2 MiB boundary and ask for transparent huge pages: the
  // GEMM streams them from DRAM, and with 4 KiB pages a TLB miss every 4 KiB held batch-1 decode
  // of quantized weights ~20% under the read bandwidth. Only the whole 2 MiB pages are advised:
  // the tail stays on 4 KiB pages, because a huge page over a partly written tail is resident
  // whole (a Qwen3-MoE expert's 3.2 MiB Q8_0 gate/up held 4 MiB: 0.8 GB more over 1024 experts).
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t align = bytes_ >= kHuge ? kHuge : 64;
  const size_t alloc = (bytes_ + 63) / 64 * 64;
  void* p = nullptr;
  if (posix_memalign(&p, align, alloc) != 0) throw std::bad_alloc();
  data_.reset(p);
  if (align == kHuge) madvise(p, bytes_ / kHuge * kHuge, MADV_HUGEPAGE);  // advice: errors ignored
  // Zero so the padding rows/k contribute 0; FromQuantRows writes every byte of its panels
  // (padding included) itself.
  if (type != WeightType::kQuant) std::memset(p, 0, alloc);
}

PackedMatrix PackedMatrix::FromF32(const float* w, int64_t n, int64_t k, WeightType type,
                                   ThreadPool* pool) {
  return FromF32Rows(
      n, k, type,
      [w, k](int64_t row, int64_t rows, float* out) {
        std::memcpy(out, w + row * k, static_cast<size_t>(rows * k) * sizeof(float));
      },
      pool);
}

PackedMatrix PackedMatrix::FromF32Rows(int64_t n, int64_t k, WeightType type,
                                       const F32RowSource& rows_of, ThreadPool* pool) {
  return FromF32Rows(n, k, type, rows_of, pool, nullptr);
}

bool PackedMatrix::SameLayout(const PackedMatrix& o) const {
  return n_ == o.n_ && k_ == o.k_ && type_ == o.type_ && bytes_ == o.bytes_ &&
         (type_ != WeightType::kQuant || quant_ == o.quant_);
}

PackedMatrix PackedMatrix::Clone(PackedMatrix* reuse) const {
  PackedMatrix pm(n_, k_, type_, quant_, reuse);
  if (bytes_ != 0) std::memcpy(pm.data_.get(), data_.get(), bytes_);
  return pm;
}

void PackedMatrix::UnpackRows(int64_t row, int64_t rows, float* out) const {
  CHECK(row >= 0 && rows >= 0 && row + rows <= n_)
      << "rows [" << row << ", " << row + rows << ") of " << n_;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = row + i, p = r / kPanel, pr = r % kPanel;
    float* dst = out + i * k_;
    if (type_ == WeightType::kQuant) {
      UnpackQuantRow(r, dst);
    } else if (type_ == WeightType::kF32) {
      const float* src = f32_panel(p);
      for (int64_t kk = 0; kk < k_; ++kk) dst[kk] = src[kk * kPanel + pr];
    } else {
      const uint16_t* src = bf16_panel(p);
      for (int64_t kk = 0; kk < k_; ++kk) {
        dst[kk] = ::astr::Bf16ToF32(src[(kk / 2) * 2 * kPanel + pr * 2 + (kk & 1)]);
      }
    }
  }
}

PackedMatrix PackedMatrix::FromF32Rows(int64_t n, int64_t k, WeightType type,
                                       const F32RowSource& rows_of, ThreadPool* pool,
                                       PackedMatrix* reuse) {
  PackedMatrix pm(n, k, type, {}, reuse);
  if (pm.bytes_ == 0) return pm;
  // One panel's 16 rows at a time; k outer, rows inner: the panel is written sequentially while its
  // 16 source rows are read as 16 forward streams.
  ParallelFor(pool, pm.panels(), 1, [&](int64_t p0, int64_t p1) {
    std::vector<float> src(static_cast<size_t>(kPanel * k));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t rows = std::min(kPanel, n - p * kPanel);
      rows_of(p * kPanel, rows, src.data());
      if (type == WeightType::kF32) {
        float* dst = reinterpret_cast<float*>(pm.data_.get()) + p * pm.panel_stride();
        for (int64_t kk = 0; kk < k; ++kk) {
          for (int64_t r = 0; r < rows; ++r) dst[kk * kPanel + r] = src[r * k + kk];
        }
      } else {
        uint16_t* dst = reinterpret_cast<uint16_t*>(pm.data_.get()) + p * pm.panel_stride();
        for (int64_t kk = 0; kk < k; ++kk) {
          uint16_t* d = dst + (kk / 2) * 2 * kPanel + (kk & 1);
          for (int64_t r = 0; r < rows; ++r) d[r * 2] = ::astr::F32ToBf16(src[r * k + kk]);
        }
      }
    }
  });
  return pm;
}

PackedMatrix PackedMatrix::FromBf16Rows(int64_t n, int64_t k, const Bf16RowPointer& row_of,
                                        ThreadPool* pool, PackedMatrix* reuse) {
  PackedMatrix pm(n, k, WeightType::kBF16, {}, reuse);
  if (pm.bytes_ == 0) return pm;
  ParallelFor(pool, pm.panels(), 1, [&](int64_t p0, int64_t p1) {
    const uint16_t* src[kPanel];
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t rows = std::min(kPanel, n - p * kPanel);
      for (int64_t r = 0; r < rows; ++r) src[r] = row_of(p * kPanel + r);
      uint32_t* dst = reinterpret_cast<uint32_t*>(reinterpret_cast<uint16_t*>(pm.data_.get()) +
                                                  p * pm.panel_stride());
      // Pair (2q, 2q + 1) of row r lands at [q][r]: one 64-byte line per pair index, written
      // whole from the 16 rows read as forward streams. Rows past n stay zero (padding).
      const int64_t pairs = k / 2;
      if (rows == kPanel) {  // a constant trip count the compiler unrolls (every panel but a last)
        for (int64_t q = 0; q < pairs; ++q, dst += kPanel) {
          for (int64_t r = 0; r < kPanel; ++r) std::memcpy(dst + r, src[r] + 2 * q, 4);
        }
      } else {
        for (int64_t q = 0; q < pairs; ++q, dst += kPanel) {
          for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r, src[r] + 2 * q, 4);
        }
      }
      if (k & 1) {  // the last element alone, its pair's second half zero
        auto* last = reinterpret_cast<uint16_t*>(dst);
        for (int64_t r = 0; r < rows; ++r) last[r * 2] = src[r][k - 1];
      }
    }
  });
  return pm;
}

PackedMatrix PackedMatrix::FromBf16(const uint16_t* w, int64_t n, int64_t k) {
  PackedMatrix pm(n, k, WeightType::kBF16);
  if (pm.bytes_ == 0) return pm;
  for (int64_t p = 0; p < pm.panels(); ++p) {
    uint16_t* dst = reinterpret_cast<uint16_t*>(pm.data_.get()) + p * pm.panel_stride();
    const int64_t rows = std::min(kPanel, n - p * kPanel);
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* src = w + (p * kPanel + r) * k;
      for (int64_t kk = 0; kk < k; ++kk) dst[(kk / 2) * 2 * kPanel + r * 2 + (kk & 1)] = src[kk];
    }
  }
  return pm;
}

namespace internal {

void SplitGemm(ThreadPool* pool, int64_t m, int64_t panels, int64_t panels_per_tile, int64_t macs,
               const std::function<void(int64_t, int64_t, int64_t, int64_t)>& run) {
  const int threads = pool == nullptr ? 1 : pool->size();
  if (threads == 1 || macs < kMinParallelMacs) {
    run(0, m, 0, panels);
    return;
  }
  const int64_t groups = (panels + panels_per_tile - 1) / panels_per_tile;
  if (groups >= threads) {
    pool->Run([&](int t, int nt) {
      const int64_t g0 = groups * t / nt, g1 = groups * (t + 1) / nt;
      const int64_t p0 = g0 * panels_per_tile;
      const int64_t p1 = std::min(panels, g1 * panels_per_tile);
      if (p0 < p1) run(0, m, p0, p1);
    });
  } else {
    pool->Run([&](int t, int nt) {
      const int64_t r0 = m * t / nt, r1 = m * (t + 1) / nt;
      if (r0 < r1) run(r0, r1, 0, panels);
    });
  }
}

}  // namespace internal

void GemmIsa(Isa isa, const float* x, int64_t ldx, int64_t m, const PackedMatrix& w, float* y,
             int64_t ldy, bool accumulate, ThreadPool* pool) {
  if (m <= 0 || w.n() <= 0) return;
  if (w.type() == WeightType::kQuant) {
    internal::QuantGemmIsa(isa, x, ldx, m, w, y, ldy, accumulate, pool);
    return;
  }
  const KernelSet& ks = Kernels(isa, w.type(), m);
  const void* xk = x;
  int64_t ldxk = ldx;
  if (ks.x_bf16) {
    // x as bf16 rows, k padded to even with a zero so the last pair reads no garbage. Grows only
    // when a call needs more than any earlier one on this thread; steady-state steps allocate
    // nothing.
    thread_local std::vector<uint16_t> xb;
    ldxk = w.k_pairs() * 2;
    if (xb.size() < static_cast<size_t>(m * ldxk)) xb.resize(m * ldxk);
    for (int64_t i = 0; i < m; ++i) {
      F32ToBf16Isa(isa, x + i * ldx, xb.data() + i * ldxk, w.k());
      if (w.k() & 1) xb[i * ldxk + w.k()] = 0;
    }
    xk = xb.data();
  }
  SplitGemm(pool, m, w.panels(), ks.panels_per_tile, m * w.n() * w.k(),
            [&](int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
              RunTiles(ks, xk, ldxk, r0, r1, w, p0, p1, y, ldy, accumulate);
            });
}

void Gemm(const float* x, int64_t ldx, int64_t m, const PackedMatrix& w, float* y, int64_t ldy,
          bool accumulate, ThreadPool* pool) {
  // Measured on the target Xeon (tools/bench_gemm.cc, 1 thread, m=128, k=2048): the AVX-512F FMA
  // tiles on bf16 weights reach ~107 GFLOP/s against ~74 for vdpbf16ps (which issues at about half
  // the FMA rate there), decode is memory-bound and equal on both, and the FMA tiles keep x in f32.
  // So the default never takes the bf16-dot tiles; GemmIsa(kAvx512Bf16, ...) still runs them. The
  // choice is fixed per process, so batch invariance holds.
  Isa isa = ActiveIsa();
  if (isa == Isa::kAvx512Bf16) isa = Isa::kAvx512;
  GemmIsa(isa, x, ldx, m, w, y, ldy, accumulate, pool);
}

}  // namespace astr::cpu
