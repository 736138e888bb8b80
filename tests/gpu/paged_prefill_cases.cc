// Op-table cases for the paged prefill attention and LaunchAppendKv (kernels/cuda/paged_prefill.h).
//
// A prefill case builds a ragged step batch with StepBatch::Append (entries = cached prefix +
// this step's chunk), scatters the entries over randomly permuted page ids, writes the cached
// prefixes into the pool and fills every other slot with bf16 NaN (so a read of any slot the step
// must not read poisons the output). On the GPU it appends the chunk's K/V with LaunchAppendKv
// (checked bit for bit against the expected pool), builds the plan and runs the prefill; the
// reference is the CPU backend's PagedAttention on the same bf16-rounded inputs (f32 pool).
//
// Case names carry every parameter; the random data is seeded by a hash of the name's shape, so a
// name reproduces its case.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/model/tensor_dtype.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/paged_attention_generic.h"
#include "kernels/cuda/paged_decode.h"
#include "kernels/cuda/paged_prefill.h"
#include "tests/gpu/op_test.h"
#include "worker/backends/cpu/cpu_attention.h"
#include "worker/step_batch.h"

namespace astr::gputest {
namespace {

using cuda::AttentionDims;
using cuda::bf16;
using cuda::PagedKv;
using cuda::PagedPrefillArgs;
using cuda::PrefillPlan;

// Outputs are convex combinations of V rows with |v| <= 1, so |out| <= 1. The GPU differs from
// the f32 reference by (a) P rounded to bf16 before P·V: each weight off by a relative 2^-8 at
// most, so the numerator moves by <= 2^-8 * sum_j p_j |v_j| <= 2^-8 * l and the output by
// <= 2^-8 ~ 0.0039; (b) the bf16 output: <= 2^-8 * |out| <= 0.0039; (c) f32 summation order and
// exp2 approximations: ~1e-6. Total <= ~0.008 < 1e-2. (Q·K products are exact in f32.)
constexpr double kPrefillTol = 1e-2;
constexpr uint16_t kNanBits = 0x7FC0;  // bf16 quiet NaN

struct Entry {
  int prefix;  // cached tokens already in the pool
  int chunk;   // this step's query rows (0: a padding entry with no rows)
};

struct PrefillCase {
  std::vector<Entry> entries;
  int page_size;
  int num_heads;
  int num_kv_heads;
  int head_dim;
  int window;  // 0 = full causal
  float softcap = 0.0f;  // > 0: scores soft-capped (Gemma 2)
  bool generic = false;  // run the generic kernel instead of the tensor-core prefill
  bool sinks = false;    // gpt-oss's per-head sink logits (SinkValues)

  std::string Shape() const {
    std::string s = "e=";
    for (size_t i = 0; i < entries.size(); ++i) {
      s += (i ? "," : "") + std::to_string(entries[i].prefix) + "+" +
           std::to_string(entries[i].chunk);
    }
    return s + " ps=" + std::to_string(page_size) + " h=" + std::to_string(num_heads) + "/" +
           std::to_string(num_kv_heads) + " d=" + std::to_string(head_dim) +
           " w=" + std::to_string(window) +
           (softcap > 0.0f ? " softcap=" + std::to_string(static_cast<int>(softcap)) : "") +
           (sinks ? " sinks" : "");
  }
};

// Per-head sink logits for a case with sinks: from -4 to 4 across the heads, so that some sinks
// take most of a row's weight and others next to none (scores here are within ~[-2, 2]).
std::vector<float> SinkValues(const PrefillCase& c) {
  std::vector<float> v;
  if (!c.sinks) return v;
  for (int h = 0; h < c.num_heads; ++h) {
    v.push_back(c.num_heads == 1 ? 1.0f : -4.0f + 8.0f * h / (c.num_heads - 1));
  }
  return v;
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

float RandomBf16(std::mt19937_64& rng) {
  return model::Bf16ToF32(
      model::F32ToBf16(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng)));
}

// Everything a prefill case uploads, and what the pool must hold after the append.
struct PrefillFixture {
  StepBatch batch;
  int num_pages = 0;
  int64_t qkv_stride = 0;        // elements per row of qkv: (H + 2 KH) * D
  std::vector<float> qkv;        // [T, qkv_stride] bf16-rounded: q [H, D] | k [KH, D] | v [KH, D]
  std::vector<float> k_ref;      // [num_pages, ps, KH, D] f32 pool for the CPU, after the append
  std::vector<float> v_ref;      // same
  std::vector<uint16_t> k_init;  // bf16 pool before the append: prefixes, NaN elsewhere
  std::vector<uint16_t> v_init;
  std::vector<uint16_t> k_want;  // bf16 pool after the append
  std::vector<uint16_t> v_want;
};

PrefillFixture MakeFixture(const PrefillCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int ps = c.page_size, kh = c.num_kv_heads, d = c.head_dim;
  const int64_t slot_elems = int64_t{kh} * d;
  PrefillFixture f;
  int needed = 0;
  for (const Entry& e : c.entries) needed += (e.prefix + e.chunk + ps - 1) / ps;
  f.num_pages = needed + 5;  // spare pages stay NaN
  std::vector<int32_t> ids(f.num_pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const size_t pool = static_cast<size_t>(f.num_pages) * ps * slot_elems;
  f.k_ref.assign(pool, 0.0f);
  f.v_ref.assign(pool, 0.0f);
  f.k_init.assign(pool, kNanBits);
  f.v_init.assign(pool, kNanBits);
  int next_page = 0;
  for (const Entry& e : c.entries) {
    const int n = (e.prefix + e.chunk + ps - 1) / ps;
    const std::vector<int32_t> pages(ids.begin() + next_page, ids.begin() + next_page + n);
    next_page += n;
    for (int pos = 0; pos < e.prefix; ++pos) {
      const int64_t base = (int64_t{pages[pos / ps]} * ps + pos % ps) * slot_elems;
      for (int64_t i = 0; i < slot_elems; ++i) {
        f.k_ref[base + i] = RandomBf16(rng);
        f.v_ref[base + i] = RandomBf16(rng);
        f.k_init[base + i] = model::F32ToBf16(f.k_ref[base + i]);
        f.v_init[base + i] = model::F32ToBf16(f.v_ref[base + i]);
      }
    }
    const std::vector<int32_t> tokens(e.chunk, 0);  // token ids do not matter here
    f.batch.Append(tokens.data(), e.chunk, e.prefix, pages.data(), ps, e.chunk > 0);
  }
  const int64_t t_rows = f.batch.num_tokens();
  f.qkv_stride = int64_t{c.num_heads + 2 * kh} * d;
  f.qkv = RoundBf16(RandomVector(t_rows * f.qkv_stride, seed ^ 0x9e3779b97f4a7c15ull));
  // Q in [-2, 2] (x2 is exact in bf16) for sharper softmax distributions.
  for (int64_t t = 0; t < t_rows; ++t) {
    for (int64_t i = 0; i < int64_t{c.num_heads} * d; ++i) f.qkv[t * f.qkv_stride + i] *= 2.0f;
  }
  f.k_want = f.k_init;
  f.v_want = f.v_init;
  for (int64_t t = 0; t < t_rows; ++t) {
    const int64_t base = f.batch.out_slots[t] * slot_elems;
    const float* k = f.qkv.data() + t * f.qkv_stride + int64_t{c.num_heads} * d;
    const float* v = k + slot_elems;
    for (int64_t i = 0; i < slot_elems; ++i) {
      f.k_ref[base + i] = k[i];
      f.v_ref[base + i] = v[i];
      f.k_want[base + i] = model::F32ToBf16(k[i]);
      f.v_want[base + i] = model::F32ToBf16(v[i]);
    }
  }
  return f;
}

cpu::ThreadPool* ReferencePool() {
  static cpu::ThreadPool pool(
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 8));
  return &pool;
}

// out: [T, H * D], the CPU backend's attention over the f32 pool.
std::vector<float> Reference(const PrefillCase& c, const PrefillFixture& f) {
  const StepBatch& b = f.batch;
  std::vector<int32_t> row_entry(b.num_tokens());
  for (int64_t e = 0; e < b.batch_size(); ++e) {
    for (int t = b.qo_indptr[e]; t < b.qo_indptr[e + 1]; ++t) row_entry[t] = e;
  }
  AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, c.page_size,
                       c.window,    0.0f,           c.softcap};
  const std::vector<float> sinks = SinkValues(c);
  if (c.sinks) shape.sinks = sinks.data();
  cpu::ThreadPool* pool = ReferencePool();
  std::vector<float> scratch(AttentionScratchFloats(shape) * pool->size());
  const int64_t ldo = int64_t{c.num_heads} * c.head_dim;
  std::vector<float> out(b.num_tokens() * ldo);
  PagedAttention(f.qkv.data(), f.qkv_stride, f.k_ref.data(), f.v_ref.data(), b, row_entry.data(),
                 shape, scratch.data(), out.data(), ldo, pool);
  return out;
}

// Compares the prefill output and names the worst element by row, position and head.
CaseResult CompareOutput(const PrefillCase& c, const StepBatch& b, const std::vector<float>& got,
                         const std::vector<float>& want) {
  int64_t worst = 0;
  const double err = MaxAbsDiff(got.data(), want.data(), static_cast<int64_t>(got.size()), &worst);
  if (err <= kPrefillTol) return Pass(err, kPrefillTol);
  const int64_t row_elems = int64_t{c.num_heads} * c.head_dim;
  const int64_t t = worst / row_elems;
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                "worst at row %lld (position %d) head %lld dim %lld: got %.6g want %.6g",
                static_cast<long long>(t), b.positions[t],
                static_cast<long long>(worst % row_elems / c.head_dim),
                static_cast<long long>(worst % c.head_dim), got[worst], want[worst]);
  return Fail(buf, err, kPrefillTol);
}

CaseResult RunPrefillCase(const PrefillCase& c) {
  AttentionDims dims{c.num_heads,
                     c.num_kv_heads,
                     c.head_dim,
                     c.window,
                     1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                     c.softcap};
  DeviceBuffer<float> sinks;
  if (c.sinks) {
    ASTR_GPU_CHECK(sinks.Upload(SinkValues(c)));
    dims.sinks = sinks.get();
  }
  const char* why = "";
  if (!c.generic && !cuda::SupportsPagedPrefill(dims, &why)) return Unsupported(why);
  const PrefillFixture f = MakeFixture(c, Fnv1a(c.Shape()));
  const StepBatch& b = f.batch;
  const int t_rows = static_cast<int>(b.num_tokens());
  const int batch = static_cast<int>(b.batch_size());
  const int64_t slot_elems = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t out_stride = int64_t{c.num_heads} * c.head_dim;

  DeviceBuffer<uint16_t> qkv, k_pool, v_pool, out;
  DeviceBuffer<int32_t> qo_indptr, kv_indptr, kv_pages, kv_last, tile_entry, tile_row;
  DeviceBuffer<int64_t> slots;
  ASTR_GPU_CHECK(qkv.Upload(ToBf16(f.qkv)));
  ASTR_GPU_CHECK(k_pool.Upload(f.k_init));
  ASTR_GPU_CHECK(v_pool.Upload(f.v_init));
  ASTR_GPU_CHECK(qo_indptr.Upload(b.qo_indptr));
  ASTR_GPU_CHECK(kv_indptr.Upload(b.kv_indptr));
  ASTR_GPU_CHECK(kv_pages.Upload(b.kv_page_indices));
  ASTR_GPU_CHECK(kv_last.Upload(b.kv_last_page_len));
  ASTR_GPU_CHECK(slots.Upload(b.out_slots));
  // Unwritten output rows stay NaN and fail the comparison.
  ASTR_GPU_CHECK(out.Upload(std::vector<uint16_t>(t_rows * out_stride, kNanBits)));

  const PagedKv kv{reinterpret_cast<bf16*>(k_pool.get()), reinterpret_cast<bf16*>(v_pool.get()),
                   f.num_pages, c.page_size};
  const bf16* q = reinterpret_cast<const bf16*>(qkv.get());
  const bf16* k_new = q + int64_t{c.num_heads} * c.head_dim;
  ASTR_GPU_CHECK(cuda::LaunchAppendKv(k_new, k_new + slot_elems, f.qkv_stride, slots.get(), t_rows,
                                      c.num_kv_heads, c.head_dim, kv, nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> k_got, v_got;
  ASTR_GPU_CHECK(k_pool.Download(&k_got));
  ASTR_GPU_CHECK(v_pool.Download(&v_got));
  for (const std::string& diff : {FirstBitDiff("append_kv k pool", k_got, f.k_want, slot_elems),
                                  FirstBitDiff("append_kv v pool", v_got, f.v_want, slot_elems)}) {
    if (!diff.empty()) return Fail(diff);
  }

  if (c.generic) {
    cuda::GenericAttentionArgs g;
    g.dims = dims;
    g.kv = kv;
    g.index = {kv_indptr.get(), kv_pages.get(), kv_last.get()};
    g.qo_indptr = qo_indptr.get();
    g.batch = batch;
    g.num_rows = t_rows;
    g.q = q;
    g.q_stride = f.qkv_stride;
    g.out = reinterpret_cast<bf16*>(out.get());
    g.out_stride = out_stride;
    ASTR_GPU_CHECK(cuda::LaunchGenericPagedAttention(g, nullptr));
  } else {
    const PrefillPlan plan = cuda::BuildPrefillPlan(b.qo_indptr.data(), batch, c.head_dim);
    if (plan.num_tiles() > cuda::MaxPrefillTiles(t_rows, batch, c.head_dim)) {
      return Fail("plan has more tiles than MaxPrefillTiles");
    }
    ASTR_GPU_CHECK(tile_entry.Upload(plan.tile_entry));
    ASTR_GPU_CHECK(tile_row.Upload(plan.tile_row_begin));
    PagedPrefillArgs args;
    args.dims = dims;
    args.kv = kv;
    args.index = {kv_indptr.get(), kv_pages.get(), kv_last.get()};
    args.qo_indptr = qo_indptr.get();
    args.batch = batch;
    args.q = q;
    args.q_stride = f.qkv_stride;
    args.out = reinterpret_cast<bf16*>(out.get());
    args.out_stride = out_stride;
    args.tile_entry = tile_entry.get();
    args.tile_row_begin = tile_row.get();
    args.num_tiles = plan.num_tiles();
    ASTR_GPU_CHECK(cuda::LaunchPagedPrefill(args, nullptr));
  }
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> out_bits;
  ASTR_GPU_CHECK(out.Download(&out_bits));
  return CompareOutput(c, b, FromBf16(out_bits), Reference(c, f));
}

void AddPrefill(PrefillCase c) {
  RegisterCase({c.generic ? "generic_attention" : "paged_prefill", c.Shape(),
                [c] { return RunPrefillCase(c); }});
}

constexpr int kPageSizes[] = {1, 7, 16, 32};
constexpr int kGroups[] = {1, 2, 4, 8};

// Query heads / KV heads for a GQA group (kept small: the CPU reference is the slow part).
PrefillCase Heads(PrefillCase c, int group) {
  c.num_kv_heads = group == 8 ? 1 : 2;
  c.num_heads = group * c.num_kv_heads;
  return c;
}

// Mixed batches: decode-like one-row entries next to long chunks, padding entries with no rows
// (with and without pages), cached prefixes of every size.
const std::vector<std::vector<Entry>>& MixedBatches() {
  static const std::vector<std::vector<Entry>> batches = {
      {{300, 1}, {0, 200}},
      {{31, 65}, {1, 17}},
      {{300, 1}, {0, 513}, {31, 1}, {1, 64}, {0, 2}},
      {{0, 0}, {300, 0}, {0, 65}, {31, 200}, {1, 1}},
      {{300, 17}, {0, 1}, {300, 1}, {1, 1}, {31, 64}},
  };
  return batches;
}

void RegisterPrefillCases() {
  const int chunks[] = {1, 2, 17, 64, 65, 200, 513};
  const int prefixes[] = {0, 1, 31, 300};
  // One entry: every chunk length x cached prefix. (ps, group) walks all 16 pairs per head_dim:
  // for a fixed prefix index pi, group index - page index = pi + d/64 (mod 4).
  for (int d : {64, 128}) {
    for (int ci = 0; ci < 7; ++ci) {
      for (int pi = 0; pi < 4; ++pi) {
        PrefillCase c{{{prefixes[pi], chunks[ci]}}, kPageSizes[(ci + pi) % 4], 0, 0, d, 0};
        AddPrefill(Heads(c, kGroups[(ci + 2 * pi + d / 64) % 4]));
      }
    }
  }
  // The generic kernel (head_dims the tensor-core kernels do not take, Gemma 2's soft-capped
  // scores): plain, windowed and capped, against the CPU backend's attention.
  for (float cap : {0.0f, 50.0f, 1.0f}) {
    PrefillCase c{{{31, 65}, {300, 1}}, 16, 0, 0, 256, cap == 1.0f ? 17 : 0, cap, true};
    AddPrefill(Heads(c, 2));
  }
  // The tensor-core prefill with soft-capped scores: Gemma 2's cap of 50, a cap of 1 under a
  // window, at head_dim 256 (Gemma 2's) and 128.
  for (int d : {128, 256}) {
    for (float cap : {50.0f, 1.0f}) {
      PrefillCase c{{{31, 65}, {300, 1}, {0, 200}}, 16, 0, 0, d, cap == 1.0f ? 17 : 0, cap};
      AddPrefill(Heads(c, 2));
    }
  }
  // gpt-oss's attention sinks, on both kernels: one row per head of a GQA group sinks most of its
  // weight, another almost none; with a window, a cached prefix and decode-like rows.
  for (bool generic : {false, true}) {
    for (int d : {64, 128}) {
      PrefillCase c{{{31, 65}, {300, 1}, {0, 200}}, 16, 0, 0, d, generic ? 0 : 17};
      c.generic = generic;
      c.sinks = true;
      AddPrefill(Heads(c, 4));
    }
  }
  RegisterCase({"paged_prefill", "a negative or non-finite softcap is refused", [] {
                  for (float cap : {-1.0f, std::numeric_limits<float>::infinity()}) {
                    const AttentionDims d{8, 2, 64, 0, 0.125f, cap};
                    if (cuda::SupportsPagedPrefill(d, nullptr) ||
                        cuda::SupportsPagedDecode(d, nullptr)) {
                      return Fail("a tensor-core kernel accepts softcap " + std::to_string(cap));
                    }
                  }
                  return Pass(0, 0);
                }});
  // Sliding windows narrower than, equal to and wider than a KV tile, over long contexts.
  const Entry windowed[] = {{300, 200}, {0, 513}, {31, 65}};
  const int windows[] = {1, 17, 64, 100};
  for (int d : {64, 128}) {
    for (int si = 0; si < 3; ++si) {
      for (int wi = 0; wi < 4; ++wi) {
        PrefillCase c{{windowed[si]}, kPageSizes[(si + wi + 1) % 4], 0, 0, d, windows[wi]};
        AddPrefill(Heads(c, kGroups[(si + 2 * wi) % 4]));
      }
    }
  }
  // Mixed batches x page sizes; every third one with a window of 48.
  for (int d : {64, 128}) {
    for (size_t bi = 0; bi < MixedBatches().size(); ++bi) {
      for (int pi = 0; pi < 4; ++pi) {
        const int k = static_cast<int>(bi) + pi;
        PrefillCase c{MixedBatches()[bi], kPageSizes[pi], 0, 0, d, k % 3 == 2 ? 48 : 0};
        AddPrefill(Heads(c, kGroups[k % 4]));
      }
    }
  }
  // head_dim 32 and 256.
  for (int d : {32, 256}) {
    std::vector<PrefillCase> cs = {
        {{{0, 513}}, 16, 0, 0, d, 0},       {{{300, 200}}, 7, 0, 0, d, 0},
        {{{31, 65}}, 1, 0, 0, d, 0},        {{{1, 1}}, 32, 0, 0, d, 0},
        {{{0, 17}}, 16, 0, 0, d, 0},        {MixedBatches()[2], 32, 0, 0, d, 0},
        {MixedBatches()[3], 7, 0, 0, d, 0}, {MixedBatches()[4], 1, 0, 0, d, 0},
        {{{300, 200}}, 16, 0, 0, d, 64},    {MixedBatches()[2], 7, 0, 0, d, 17},
    };
    for (size_t i = 0; i < cs.size(); ++i) AddPrefill(Heads(cs[i], kGroups[i % 4]));
  }
  // Real model shapes: Llama 3 8B (32/8, d 128), Qwen2.5 7B (28/4: group 7), Qwen2.5 0.5B
  // (14/2, d 64: group 7), Mistral-style window.
  const std::vector<Entry> model_batch = {{300, 200}, {0, 65}, {31, 1}};
  AddPrefill({model_batch, 16, 32, 8, 128, 0});
  AddPrefill({model_batch, 16, 28, 4, 128, 0});
  AddPrefill({model_batch, 32, 14, 2, 64, 0});
  AddPrefill({model_batch, 16, 32, 8, 128, 100});
}
ASTR_GPU_CASES(RegisterPrefillCases);

// LaunchAppendKv alone: some slots < 0 (skipped), the vector path (stride and row a multiple of 8
// elements) and the element path (odd stride, or a row of 4 elements).
struct AppendCase {
  int rows, num_kv_heads, head_dim, page_size, stride_pad;
  std::string Shape() const {
    return "rows=" + std::to_string(rows) + " kvh=" + std::to_string(num_kv_heads) +
           " d=" + std::to_string(head_dim) + " ps=" + std::to_string(page_size) +
           " pad=" + std::to_string(stride_pad);
  }
};

CaseResult RunAppendCase(const AppendCase& c) {
  std::mt19937_64 rng(Fnv1a(c.Shape()));
  const int64_t row_elems = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t stride = row_elems + c.stride_pad;
  const int num_pages = (2 * c.rows + c.page_size - 1) / c.page_size + 1;
  const int64_t pool_slots = int64_t{num_pages} * c.page_size;
  // Distinct random slots; every fifth row appends nothing.
  std::vector<int64_t> all(pool_slots);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int64_t> slots(all.begin(), all.begin() + c.rows);
  for (int t = 0; t < c.rows; t += 5) slots[t] = -1;
  const std::vector<uint16_t> k_new = ToBf16(RandomVector(c.rows * stride, rng()));
  const std::vector<uint16_t> v_new = ToBf16(RandomVector(c.rows * stride, rng()));
  const std::vector<uint16_t> k_init = ToBf16(RandomVector(pool_slots * row_elems, rng()));
  const std::vector<uint16_t> v_init = ToBf16(RandomVector(pool_slots * row_elems, rng()));
  std::vector<uint16_t> k_want = k_init, v_want = v_init;
  for (int t = 0; t < c.rows; ++t) {
    if (slots[t] < 0) continue;
    std::copy_n(k_new.begin() + t * stride, row_elems, k_want.begin() + slots[t] * row_elems);
    std::copy_n(v_new.begin() + t * stride, row_elems, v_want.begin() + slots[t] * row_elems);
  }
  DeviceBuffer<uint16_t> dk_new, dv_new, dk, dv;
  DeviceBuffer<int64_t> dslots;
  ASTR_GPU_CHECK(dk_new.Upload(k_new));
  ASTR_GPU_CHECK(dv_new.Upload(v_new));
  ASTR_GPU_CHECK(dk.Upload(k_init));
  ASTR_GPU_CHECK(dv.Upload(v_init));
  ASTR_GPU_CHECK(dslots.Upload(slots));
  const PagedKv kv{reinterpret_cast<bf16*>(dk.get()), reinterpret_cast<bf16*>(dv.get()), num_pages,
                   c.page_size};
  ASTR_GPU_CHECK(cuda::LaunchAppendKv(
      reinterpret_cast<const bf16*>(dk_new.get()), reinterpret_cast<const bf16*>(dv_new.get()),
      stride, dslots.get(), c.rows, c.num_kv_heads, c.head_dim, kv, nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> k_got, v_got;
  ASTR_GPU_CHECK(dk.Download(&k_got));
  ASTR_GPU_CHECK(dv.Download(&v_got));
  for (const std::string& diff : {FirstBitDiff("k pool", k_got, k_want, row_elems),
                                  FirstBitDiff("v pool", v_got, v_want, row_elems)}) {
    if (!diff.empty()) return Fail(diff);
  }
  return Pass(0.0, 0.0);
}

void RegisterAppendCases() {
  const AppendCase cases[] = {
      {37, 2, 64, 16, 0},  // vector path
      {50, 8, 128, 7, 0},  // vector path, odd page size
      {23, 8, 128, 1, 1},  // odd stride: element path
      {40, 3, 96, 32, 8},  // 288-element rows, padded stride: vector path
      {9, 1, 4, 3, 0},     // 4-element rows: element path
  };
  for (const AppendCase& c : cases) {
    RegisterCase({"append_kv", c.Shape(), [c] { return RunAppendCase(c); }});
  }
}
ASTR_GPU_CASES(RegisterAppendCases);

}  // namespace
}  // namespace astr::gputest
