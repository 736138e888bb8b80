// Op-table cases of the paged decode kernel (kernels/cuda/paged_decode.h): every case builds a
// batch of entries with scattered pages, runs LaunchPagedDecode (fused append + split attention +
// combine) and compares with the CPU backend's PagedAttention on the same bf16-rounded q / k / v,
// the new token's K/V placed in the CPU pool at its slot. It also checks the fused append bit for
// bit: after the launch the GPU pool equals the input pool with k_new / v_new at each appending
// entry's slot, and nothing else changed.
//
// Traps for wrong reads: pool slots that no entry may read (unassigned pages, the tail of each last
// page, positions before a sliding window, and the slot an entry appends to) hold NaN on the GPU,
// and k_new / v_new of an entry that does not append hold values unlike the pool's; o_partial,
// lse_partial and out start as NaN. Any such read or missing write shows as NaN in the output.
//
// Tolerance 1e-2 absolute: |v| < 1 so outputs are O(1) weighted means of V. The output is rounded
// to bf16 (<= 2^-9 relative, ~0.002), and the MMA weights P are bf16 (<= 2^-9 relative each; the
// denominator uses the same rounded weights, so the mean moves by <= ~0.002). f32 accumulation and
// exp2f add ~1e-6. Worst case ~0.004, so 1e-2 leaves a 2.5x margin while any indexing or masking
// error (one wrong or missing position among <= 4097 moves some output by far more, or to NaN)
// is caught.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/model/tensor_dtype.h"
#include "kernels/cuda/paged_decode.h"
#include "tests/gpu/op_test.h"
#include "worker/backends/cpu/cpu_attention.h"
#include "worker/step_batch.h"

namespace astr::gputest {
namespace {

using cuda::AttentionDims;
using cuda::bf16;

constexpr int kH200Sms = 132;
constexpr int kAutoSplits = 0;  // DecodeCase::splits: ChooseDecodeSplits(batch, kv_heads, 132)
constexpr double kTol = 1e-2;   // see the file comment
constexpr uint16_t kNanBits = 0x7fc0;

enum class Append { kAll, kNone, kAlternate };  // which entries have out_slot >= 0

struct DecodeCase {
  std::vector<int> kv_lens;  // per entry, 0 = padding (no pages)
  std::string lens_label;    // how kv_lens reads in the case name
  int page_size = 16;
  int num_heads = 32;
  int num_kv_heads = 8;
  int head_dim = 128;
  int window = 0;
  int splits = kAutoSplits;
  Append append = Append::kAll;
  float q_scale = 3.0f;  // q uniform in [-q_scale, q_scale): score std ~ q_scale / 3 (k in [-1, 1))
  // q <= 0 and k >= 0: every real score is strongly negative (~ -8 for head_dim 128), so a masked
  // position that leaks in with score 0 (a zero-filled row) would dominate the softmax.
  bool negative_scores = false;
  uint64_t seed = 1;
  int stages = 0;  // cp.async pipeline depth; 0: the deepest this device's shared memory allows
  float softcap = 0.0f;  // > 0: scores soft-capped (Gemma 2)
  bool sinks = false;    // gpt-oss's per-head sink logits (SinkValues)

  int batch() const { return static_cast<int>(kv_lens.size()); }
  int num_splits() const {
    return splits == kAutoSplits ? cuda::ChooseDecodeSplits(batch(), num_kv_heads, kH200Sms)
                                 : splits;
  }
  bool appends(int b) const {
    return kv_lens[b] > 0 &&
           (append == Append::kAll || (append == Append::kAlternate && b % 2 == 0));
  }
  int row_floats() const { return num_kv_heads * head_dim; }  // one slot of one pool
  int64_t qkv_stride() const {
    return static_cast<int64_t>(num_heads + 2 * num_kv_heads) * head_dim;
  }
  std::string shape() const;
};

std::string DecodeCase::shape() const {
  const char* app = append == Append::kAll ? "all" : append == Append::kNone ? "none" : "alt";
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "b=%d kv=%s ps=%d h=%d/%d d=%d win=%d splits=%s%d append=%s q=%g%s "
                "seed=%llu",
                batch(), lens_label.c_str(), page_size, num_heads, num_kv_heads, head_dim, window,
                splits == kAutoSplits ? "auto:" : "", num_splits(), app, q_scale,
                negative_scores ? " scores=neg" : "", static_cast<unsigned long long>(seed));
  std::string out(buf);
  if (stages != 0) out += " stages=" + std::to_string(stages);
  if (softcap > 0.0f) out += " softcap=" + std::to_string(static_cast<int>(softcap));
  if (sinks) out += " sinks";
  return out;
}

// Per-head sink logits for a case with sinks: from -4 to 4 across the heads, so that some sinks
// take most of a row's weight and others next to none.
std::vector<float> SinkValues(const DecodeCase& c) {
  std::vector<float> v;
  if (!c.sinks) return v;
  for (int h = 0; h < c.num_heads; ++h) {
    v.push_back(c.num_heads == 1 ? 1.0f : -4.0f + 8.0f * h / (c.num_heads - 1));
  }
  return v;
}

// Portable draws (the distributions' algorithms are implementation-defined; these are not).
uint64_t Draw(std::mt19937_64& rng, uint64_t n) { return rng() % n; }
// A bf16 value uniform in [-1, 1) (24 random bits, then rounded to bf16).
uint16_t DrawBf16(std::mt19937_64& rng) {
  return model::F32ToBf16(static_cast<float>(rng() >> 40) * 0x1p-23f - 1.0f);
}

// Host-side inputs of one case. Pools are bf16 bits [num_pages, page_size, kv_heads, head_dim].
struct Inputs {
  int num_pages = 0;
  std::vector<std::vector<int32_t>> pages;  // per entry, in sequence order
  std::vector<int32_t> kv_indptr, kv_page_indices, kv_last_page_len;
  std::vector<int64_t> out_slots;
  std::vector<uint16_t> k_gpu, v_gpu;    // the pool the kernel starts from
  std::vector<uint16_t> k_want, v_want;  // the pool it must leave (appends done)
  std::vector<float> k_ref, v_ref;       // the CPU reference pool (f32, new token in place)
  std::vector<uint16_t> qkv;             // [batch, num_heads + 2 * kv_heads, head_dim]
};

int64_t SlotOf(const Inputs& in, int b, int pos, int page_size) {
  return static_cast<int64_t>(in.pages[b][pos / page_size]) * page_size + pos % page_size;
}

// Pages: a random permutation of [0, num_pages), handed out in order; 3 pages stay unused.
void BuildPages(const DecodeCase& c, std::mt19937_64& rng, Inputs* in) {
  int total = 0;
  for (int len : c.kv_lens) total += (len + c.page_size - 1) / c.page_size;
  in->num_pages = total + 3;
  std::vector<int32_t> perm(in->num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  for (int i = in->num_pages - 1; i > 0; --i) std::swap(perm[i], perm[Draw(rng, i + 1)]);
  int next = 0;
  in->kv_indptr = {0};
  for (int b = 0; b < c.batch(); ++b) {
    const int n = (c.kv_lens[b] + c.page_size - 1) / c.page_size;
    in->pages.emplace_back(perm.begin() + next, perm.begin() + next + n);
    next += n;
    in->kv_page_indices.insert(in->kv_page_indices.end(), in->pages[b].begin(), in->pages[b].end());
    in->kv_indptr.push_back(static_cast<int32_t>(in->kv_page_indices.size()));
    // A padding entry's last page length is never read; 0 keeps it obviously unused.
    in->kv_last_page_len.push_back(n > 0 ? c.kv_lens[b] - (n - 1) * c.page_size : 0);
  }
}

// Fills the pools: every slot NaN, then each entry's readable positions [lo, kv_len) random
// bf16 values (the same in the GPU and reference pools), then the append slots.
void BuildPools(const DecodeCase& c, std::mt19937_64& rng, Inputs* in) {
  const int64_t pool_elems = static_cast<int64_t>(in->num_pages) * c.page_size * c.row_floats();
  in->k_gpu.assign(pool_elems, kNanBits);
  in->v_gpu.assign(pool_elems, kNanBits);
  for (int b = 0; b < c.batch(); ++b) {
    const int len = c.kv_lens[b];
    const int lo = c.window > 0 ? std::max(0, len - c.window) : 0;
    for (int pos = lo; pos < len; ++pos) {
      const int64_t base = SlotOf(*in, b, pos, c.page_size) * c.row_floats();
      for (int i = 0; i < c.row_floats(); ++i) {
        in->k_gpu[base + i] = DrawBf16(rng) & (c.negative_scores ? 0x7fff : 0xffff);
        in->v_gpu[base + i] = DrawBf16(rng);
      }
    }
  }
  in->k_want = in->k_gpu;
  in->v_want = in->v_gpu;
  // qkv rows: q in [-q_scale, q_scale), k_new / v_new in [-1, 1); with negative_scores the sign
  // bit of q is set and that of k_new cleared.
  in->qkv.resize(c.batch() * c.qkv_stride());
  const int q_elems = c.num_heads * c.head_dim;
  for (int b = 0; b < c.batch(); ++b) {
    uint16_t* row = in->qkv.data() + b * c.qkv_stride();
    for (int i = 0; i < c.qkv_stride(); ++i) row[i] = DrawBf16(rng);
    for (int i = 0; i < q_elems; ++i)
      row[i] = model::F32ToBf16(model::Bf16ToF32(row[i]) * c.q_scale);
    if (!c.negative_scores) continue;
    for (int i = 0; i < q_elems; ++i) row[i] |= 0x8000;
    for (int i = 0; i < c.row_floats(); ++i) row[q_elems + i] &= 0x7fff;
  }
  in->out_slots.assign(c.batch(), -1);
  for (int b = 0; b < c.batch(); ++b) {
    if (!c.appends(b)) continue;
    const int64_t slot = SlotOf(*in, b, c.kv_lens[b] - 1, c.page_size);
    in->out_slots[b] = slot;
    const uint16_t* k_new = in->qkv.data() + b * c.qkv_stride() + c.num_heads * c.head_dim;
    const uint16_t* v_new = k_new + c.row_floats();
    const int64_t base = slot * c.row_floats();
    for (int i = 0; i < c.row_floats(); ++i) {
      in->k_gpu[base + i] = kNanBits;  // stale: the kernel must take the row from k_new
      in->v_gpu[base + i] = kNanBits;
      in->k_want[base + i] = k_new[i];
      in->v_want[base + i] = v_new[i];
    }
  }
  in->k_ref = FromBf16(in->k_want);
  in->v_ref = FromBf16(in->v_want);
}

// The CPU backend's attention for the non-padding entries; padding rows stay zero.
std::vector<float> Reference(const DecodeCase& c, const Inputs& in) {
  const int row = c.num_heads * c.head_dim;
  std::vector<float> want(static_cast<size_t>(c.batch()) * row, 0.0f);
  StepBatch batch;
  std::vector<int> entry_of_row;
  std::vector<float> q;
  for (int b = 0; b < c.batch(); ++b) {
    if (c.kv_lens[b] == 0) continue;
    const int32_t token = 0;
    batch.Append(&token, 1, c.kv_lens[b] - 1, in.pages[b].data(), c.page_size, false);
    entry_of_row.push_back(b);
    const std::vector<uint16_t> q_bits(in.qkv.begin() + b * c.qkv_stride(),
                                       in.qkv.begin() + b * c.qkv_stride() + row);
    const std::vector<float> q_row = FromBf16(q_bits);
    q.insert(q.end(), q_row.begin(), q_row.end());
  }
  if (entry_of_row.empty()) return want;
  AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, c.page_size,
                       c.window,    0.0f,           c.softcap};
  const std::vector<float> sinks = SinkValues(c);
  if (c.sinks) shape.sinks = sinks.data();
  std::vector<float> scratch(AttentionScratchFloats(shape));
  std::vector<int32_t> row_entry(entry_of_row.size());
  std::iota(row_entry.begin(), row_entry.end(), 0);
  std::vector<float> out(entry_of_row.size() * row);
  PagedAttention(q.data(), row, in.k_ref.data(), in.v_ref.data(), batch, row_entry.data(), shape,
                 scratch.data(), out.data(), row, nullptr);
  for (size_t t = 0; t < entry_of_row.size(); ++t) {
    std::copy(out.begin() + t * row, out.begin() + (t + 1) * row,
              want.begin() + static_cast<size_t>(entry_of_row[t]) * row);
  }
  return want;
}

CaseResult RunDecodeCase(const DecodeCase& c) {
  AttentionDims dims;
  dims.num_heads = c.num_heads;
  dims.num_kv_heads = c.num_kv_heads;
  dims.head_dim = c.head_dim;
  dims.sliding_window = c.window;
  dims.sm_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));  // what the CPU backend uses
  dims.softcap = c.softcap;
  DeviceBuffer<float> sinks;
  if (c.sinks) {
    ASTR_GPU_CHECK(sinks.Upload(SinkValues(c)));
    dims.sinks = sinks.get();
  }
  const char* why = nullptr;
  if (!cuda::SupportsPagedDecode(dims, &why)) return Unsupported(why);

  std::mt19937_64 rng(c.seed);
  Inputs in;
  BuildPages(c, rng, &in);
  BuildPools(c, rng, &in);
  const std::vector<float> want = Reference(c, in);

  const int batch = c.batch(), splits = c.num_splits();
  const int64_t out_stride = static_cast<int64_t>(c.num_heads) * c.head_dim + 8;  // a gap
  // Sized at construction: even an empty array (no pages at all) gets a real allocation.
  DeviceBuffer<uint16_t> k_pool(in.k_gpu.size()), v_pool(in.v_gpu.size()), qkv(in.qkv.size());
  DeviceBuffer<uint16_t> out(batch * out_stride);
  DeviceBuffer<int32_t> indptr(in.kv_indptr.size()), page_ids(in.kv_page_indices.size());
  DeviceBuffer<int32_t> last_len(in.kv_last_page_len.size());
  DeviceBuffer<int64_t> slots(in.out_slots.size());
  DeviceBuffer<float> o_part(cuda::DecodePartialOutFloats(batch, dims, splits));
  DeviceBuffer<float> lse_part(cuda::DecodePartialLseFloats(batch, dims, splits));
  ASTR_GPU_CHECK(k_pool.Upload(in.k_gpu));
  ASTR_GPU_CHECK(v_pool.Upload(in.v_gpu));
  ASTR_GPU_CHECK(qkv.Upload(in.qkv));
  ASTR_GPU_CHECK(indptr.Upload(in.kv_indptr));
  ASTR_GPU_CHECK(page_ids.Upload(in.kv_page_indices));
  ASTR_GPU_CHECK(last_len.Upload(in.kv_last_page_len));
  ASTR_GPU_CHECK(slots.Upload(in.out_slots));
  ASTR_GPU_CHECK(cudaMemset(out.get(), 0xff, out.size() * sizeof(uint16_t)));  // NaN
  ASTR_GPU_CHECK(cudaMemset(o_part.get(), 0xff, o_part.size() * sizeof(float)));
  ASTR_GPU_CHECK(cudaMemset(lse_part.get(), 0xff, lse_part.size() * sizeof(float)));

  cuda::PagedDecodeArgs a;
  a.dims = dims;
  a.kv = {reinterpret_cast<bf16*>(k_pool.get()), reinterpret_cast<bf16*>(v_pool.get()),
          in.num_pages, c.page_size};
  a.index = {indptr.get(), page_ids.get(), last_len.get()};
  a.batch = batch;
  a.q = reinterpret_cast<const bf16*>(qkv.get());
  a.q_stride = c.qkv_stride();
  a.k_new = a.q + c.num_heads * c.head_dim;
  a.v_new = a.k_new + c.row_floats();
  a.kv_new_stride = c.qkv_stride();
  a.out_slots = slots.get();
  a.num_splits = splits;
  int optin = 0;
  ASTR_GPU_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  a.stages = c.stages != 0 ? c.stages : cuda::PagedDecodeStages(c.head_dim, optin);
  if (cuda::PagedDecodeSharedBytes(c.head_dim, a.stages) > static_cast<size_t>(optin)) {
    return Unsupported("head_dim " + std::to_string(c.head_dim) + " at " +
                       std::to_string(a.stages) + " stages needs more shared memory than " +
                       std::to_string(optin) + " bytes");
  }
  a.o_partial = o_part.get();
  a.lse_partial = lse_part.get();
  a.out = reinterpret_cast<bf16*>(out.get());
  a.out_stride = out_stride;
  ASTR_GPU_CHECK(cuda::LaunchPagedDecode(a, nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());

  std::vector<uint16_t> k_after, v_after, out_bits;
  ASTR_GPU_CHECK(k_pool.Download(&k_after));
  ASTR_GPU_CHECK(v_pool.Download(&v_after));
  ASTR_GPU_CHECK(out.Download(&out_bits));
  for (const std::string& diff : {FirstBitDiff("K", k_after, in.k_want, c.row_floats()),
                                  FirstBitDiff("V", v_after, in.v_want, c.row_floats())}) {
    if (!diff.empty()) return Fail("fused append: " + diff);
  }
  const int row = c.num_heads * c.head_dim;
  std::vector<uint16_t> got_bits;
  for (int b = 0; b < batch; ++b) {
    const uint16_t* r = out_bits.data() + b * out_stride;
    got_bits.insert(got_bits.end(), r, r + row);
    for (int i = row; i < out_stride; ++i) {
      if (r[i] != 0xffff) return Fail("out: the gap after row " + std::to_string(b) + " changed");
    }
  }
  return Compare(FromBf16(got_bits), want, kTol);
}

// ---- the case table --------------------------------------------------------------------------

std::string JoinLens(const std::vector<int>& lens) {
  std::string s;
  for (size_t i = 0; i < lens.size(); ++i) s += (i ? "," : "") + std::to_string(lens[i]);
  return s;
}

// `batch` lengths in [1, max_len] from `seed`, with every `pad_every`-th entry padding (0 = none).
std::vector<int> MixedLens(int batch, int max_len, uint64_t seed, int pad_every) {
  std::mt19937_64 rng(seed);
  std::vector<int> lens(batch);
  for (int b = 0; b < batch; ++b) {
    lens[b] = 1 + static_cast<int>(Draw(rng, max_len));
    if (pad_every > 0 && b % pad_every == pad_every - 1) lens[b] = 0;
  }
  return lens;
}

void Add(DecodeCase c) {
  if (c.lens_label.empty()) c.lens_label = JoinLens(c.kv_lens);
  RegisterCase({"paged_decode", c.shape(), [c] { return RunDecodeCase(c); }});
}

DecodeCase Case(std::vector<int> lens, int ps, int heads, int kv_heads, int hd, int splits) {
  DecodeCase c;
  c.kv_lens = std::move(lens);
  c.page_size = ps;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = hd;
  c.splits = splits;
  static uint64_t next_seed = 1000;  // distinct data per case, fixed by this file's table order
  c.seed = next_seed++;
  return c;
}

DecodeCase Mixed(int batch, int max_len, uint64_t seed, int pad_every, int ps, int heads,
                 int kv_heads, int hd, int splits) {
  DecodeCase c = Case(MixedLens(batch, max_len, seed, pad_every), ps, heads, kv_heads, hd, splits);
  c.lens_label = "rand" + std::to_string(max_len) + "@" + std::to_string(seed) +
                 (pad_every > 0 ? "/pad" + std::to_string(pad_every) : "");
  return c;
}

void RegisterDecodeCases() {
  const int kMax = cuda::kMaxDecodeSplits;
  // KV lengths around the tile (64) and page (16) boundaries, one entry, 8 kv heads x group 4.
  for (int len : {1, 2, 3, 15, 16, 17, 63, 64, 65, 100, 129, 1000, 4097}) {
    for (int splits : {1, kAutoSplits, kMax}) Add(Case({len}, 16, 32, 8, 128, splits));
  }
  // Page sizes, including ones that do not divide the tile (tiles span pages).
  for (int ps : {1, 3, 7, 16, 32}) {
    for (int hd : {64, 128}) Add(Case({1, 37, 300}, ps, 8, 4, hd, kAutoSplits));
  }
  Add(Case({1000}, 1, 8, 4, 128, kMax));
  Add(Case({1000}, 7, 8, 4, 128, kMax));
  Add(Case({31, 32, 33}, 32, 8, 4, 128, 2));
  // GQA group x head_dim (2 kv heads).
  for (int group : {1, 2, 3, 4, 8, 16}) {
    for (int hd : {32, 64, 128, 256}) Add(Case({5, 130, 777}, 16, 2 * group, 2, hd, kAutoSplits));
  }
  Add(Case({4097}, 16, 32, 2, 256, kMax));
  // The two-stage pipeline (what 99 KB parts run at head_dim 128), on every device.
  for (int hd : {32, 64, 128, 256}) {
    DecodeCase c = Case({5, 130, 777}, 16, 8, 2, hd, kAutoSplits);
    c.stages = 2;
    Add(c);
  }
  for (int window : {63, 1000}) {
    DecodeCase c = Case({1, 100, 2000}, 7, 32, 8, 128, kMax);
    c.window = window;
    c.stages = 2;
    Add(c);
  }
  Add(Case({4097}, 16, 16, 16, 32, 1));
  // Batch sizes with mixed lengths.
  for (int batch : {1, 3, 8, 33}) {
    for (int splits : {1, kAutoSplits, kMax}) {
      Add(Mixed(batch, 600, 7 + batch, 0, 16, 16, 4, 128, splits));
    }
  }
  Add(Mixed(33, 4097, 99, 0, 16, 16, 2, 64, kAutoSplits));
  Add(Mixed(33, 300, 5, 0, 1, 8, 1, 128, kAutoSplits));  // group 8 on one kv head, page size 1
  // Sliding window: shorter, equal and longer than the context; window edges off the tiles.
  for (int window : {1, 8, 63, 64, 65, 1000}) {
    for (int splits : {1, kAutoSplits}) {
      DecodeCase c = Case({1, 100, 2000}, 7, 32, 8, 128, splits);
      c.window = window;
      Add(c);
    }
  }
  for (int window : {4096, 5000}) {
    DecodeCase c = Case({4097, 1000}, 16, 16, 4, 64, kMax);
    c.window = window;
    Add(c);
  }
  // Padding entries (no pages): zero output, no append.
  for (int splits : {1, kAutoSplits, kMax}) {
    Add(Case({0, 17, 0, 300, 1, 0, 64, 0}, 16, 16, 4, 128, splits));
  }
  Add(Case({0, 0, 0}, 16, 16, 4, 128, kAutoSplits));
  Add(Mixed(33, 700, 3, 3, 7, 16, 4, 128, kAutoSplits));
  // out_slot < 0: the last position comes from the pool, k_new / v_new are not read.
  for (Append mode : {Append::kNone, Append::kAlternate}) {
    for (int splits : {1, kAutoSplits, kMax}) {
      DecodeCase c = Mixed(8, 400, 11, 0, 16, 16, 4, 128, splits);
      c.append = mode;
      Add(c);
    }
  }
  DecodeCase one = Case({1}, 16, 8, 2, 64, 1);
  one.append = Append::kNone;
  Add(one);
  // Peaked softmax (score std ~8): the running max changes often and matters.
  for (int splits : {1, kAutoSplits, kMax}) {
    DecodeCase c = Case({100, 1000, 4097}, 16, 32, 8, 128, splits);
    c.q_scale = 24.0f;
    Add(c);
  }
  DecodeCase sharp = Mixed(8, 2000, 17, 0, 32, 64, 8, 64, kAutoSplits);
  sharp.q_scale = 24.0f;
  Add(sharp);
  // All scores strongly negative: masking of the zero-filled rows past a chunk's end must hold.
  for (int splits : {1, kAutoSplits, kMax}) {
    DecodeCase c = Case({1, 17, 100, 1000}, 16, 16, 4, 128, splits);
    c.negative_scores = true;
    Add(c);
  }
  for (int hd : {32, 64, 256}) {
    DecodeCase c = Case({2, 65, 333}, 7, 8, 2, hd, kAutoSplits);
    c.negative_scores = true;
    Add(c);
  }
  // Soft-capped scores (Gemma 2's 50, and a cap of 1 that flattens sharp scores), with splits
  // (their log-sum-exps merge capped scores) and a window, at Gemma 2's head_dim 256 too.
  for (float cap : {50.0f, 1.0f}) {
    for (int splits : {1, kMax}) {
      DecodeCase c = Case({1, 100, 2000}, 16, 16, 8, cap == 1.0f ? 256 : 128, splits);
      c.softcap = cap;
      c.q_scale = 24.0f;
      if (cap == 1.0f) c.window = 63;
      Add(c);
    }
  }
  // gpt-oss's attention sinks: the combine adds each head's to the merged denominator, with one
  // split and with many (empty splits and padding entries included), and under a window.
  for (int splits : {1, kMax}) {
    DecodeCase c = Case({0, 1, 100, 2000}, 16, 16, 4, 64, splits);
    c.sinks = true;
    c.window = splits == 1 ? 0 : 128;
    Add(c);
  }
  DecodeCase neg_window = Case({1, 100, 2000}, 16, 32, 8, 128, kAutoSplits);
  neg_window.window = 65;
  neg_window.negative_scores = true;
  Add(neg_window);
}

ASTR_GPU_CASES(RegisterDecodeCases);

}  // namespace
}  // namespace astr::gputest
