#include "common/model/gguf.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "tests/support/test_util.h"

namespace astr {
namespace {

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}
void WriteAll(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}
template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
bool Contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

TEST(GgufTest, Stories260KMetadataAndTensors) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  auto f = model::GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const model::GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.tensors().size(), 48u);
  EXPECT_EQ(g.metadata().size(), 19u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.data_offset(), 14176u);
  EXPECT_EQ(*g.GetString("general.architecture"), "llama");
  EXPECT_EQ(*g.GetInt("llama.embedding_length"), 64);
  EXPECT_EQ(*g.GetInt("llama.attention.head_count_kv"), 4);
  EXPECT_FALSE(g.GetInt("llama.rope.freq_base").ok());
  EXPECT_DOUBLE_EQ(*g.GetFloat("llama.rope.freq_base", 10000.0), 10000.0);
  EXPECT_FALSE(g.GetString("llama.embedding_length").ok());  // wrong type
  const model::GgufTensor* q = g.FindTensor("blk.0.attn_k.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->ne, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(q->shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(q->dtype, model::DType::kF32);
  std::vector<float> a, b;
  ASSERT_TRUE(g.ReadF32(*g.FindTensor("token_embd.weight"), &a).ok());
  ASSERT_TRUE(g.ReadF32(*g.FindTensor("output.weight"), &b).ok());
  EXPECT_EQ(a, b);  // README: output equals token_embd
}

TEST(GgufTest, TinyRandomF16Dequantizes) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/llama-2-tiny-random.gguf");
  auto f = model::GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const model::GgufTensor* t = (*f)->FindTensor("token_embd.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, model::DType::kF16);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{32000, 8}));
  std::vector<float> v;
  ASSERT_TRUE((*f)->ReadF32(*t, &v).ok());
  ASSERT_EQ(v.size(), 256000u);
  // Compare with a by-hand decode of the first raw half.
  uint16_t h;
  std::memcpy(&h, t->data, 2);
  const int e = (h >> 10) & 31, m = h & 1023;
  const double expect = (h & 0x8000 ? -1 : 1) *
                        (e == 0 ? m * std::ldexp(1.0, -24) : (1024 + m) * std::ldexp(1.0, e - 25));
  EXPECT_EQ(v[0], static_cast<float>(expect));
  double sum = 0;
  for (float x : v) sum += std::fabs(x);
  EXPECT_GT(sum, 0.0);
}

std::vector<std::pair<std::string, model::GgufValue>> AllTypesMetadata() {
  return {{"u8", model::GgufValue::U8(200)},
          {"i8", model::GgufValue::I8(-100)},
          {"u16", model::GgufValue::U16(60000)},
          {"i16", model::GgufValue::I16(-30000)},
          {"u32", model::GgufValue::U32(4000000000u)},
          {"i32", model::GgufValue::I32(-2000000000)},
          {"u64", model::GgufValue::U64(18000000000000000000ull)},
          {"i64", model::GgufValue::I64(-9000000000000000000ll)},
          {"f32", model::GgufValue::F32(1.5f)},
          {"f64", model::GgufValue::F64(-2.25e100)},
          {"bool", model::GgufValue::Bool(true)},
          {"string", model::GgufValue::String("hello \xE2\x96\x81 world")},
          {"strings", model::GgufValue::StringArray({"a", "", "ccc"})},
          {"floats", model::GgufValue::F32Array({0.5f, -1.0f})},
          {"nested",
           model::GgufValue::Array(model::GgufType::kArray, {model::GgufValue::I32Array({1, 2}),
                                                             model::GgufValue::I32Array({})})},
          {"empty", model::GgufValue::Array(model::GgufType::kU8, {})}};
}

TEST(GgufTest, RoundTripEveryMetadataTypeAndTensorType) {
  const std::string path = testing::TempDir("gguf") + "/rt.gguf";
  std::vector<float> f32(64);
  for (int i = 0; i < 64; ++i) f32[i] = 0.25f * static_cast<float>(i - 30);
  // Values exactly representable in every format, so a round trip is exact.
  std::vector<uint16_t> f16(64), bf16(64);
  for (int i = 0; i < 64; ++i) f16[i] = model::F32ToF16(f32[i]), bf16[i] = model::F32ToBf16(f32[i]);
  // One Q8_0 block by hand: d = 0.5 (f16 0x3800), q = -16..15.
  std::vector<uint8_t> q8(34);
  q8[0] = 0x00, q8[1] = 0x38;
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  auto meta = AllTypesMetadata();
  ASSERT_TRUE(model::WriteGgufFile(path, meta,
                                   {{"a.f32", {2, 32}, model::DType::kF32, Bytes(f32)},
                                    {"b.f16", {64}, model::DType::kF16, Bytes(f16)},
                                    {"c.bf16", {4, 4, 4}, model::DType::kBF16, Bytes(bf16)},
                                    {"d.q8_0", {1, 32}, model::DType::kQ8_0, q8}},
                                   /*alignment=*/64)
                  .ok());
  auto f = model::GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const model::GgufFile& g = **f;
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.data_offset() % 64, 0u);
  for (const auto& [key, value] : meta) {
    const model::GgufValue* got = g.Find(key);
    ASSERT_NE(got, nullptr) << key;
    EXPECT_TRUE(*got == value) << key << ": " << got->ToString() << " vs " << value.ToString();
  }
  EXPECT_EQ(g.Find("u64")->u, 18000000000000000000ull);
  EXPECT_EQ(g.Find("i8")->i, -100);
  for (const char* name : {"a.f32", "b.f16", "c.bf16"}) {
    std::vector<float> v;
    ASSERT_TRUE(g.ReadF32(*g.FindTensor(name), &v).ok());
    EXPECT_EQ(v, f32) << name;
  }
  EXPECT_EQ(g.FindTensor("c.bf16")->shape, (std::vector<int64_t>{4, 4, 4}));
  std::vector<float> v;
  ASSERT_TRUE(g.ReadF32(*g.FindTensor("d.q8_0"), &v).ok());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(v[j], 0.5f * (j - 16));
  for (const model::GgufTensor& t : g.tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;
}

TEST(GgufTest, Q4BlocksDequantizeByHand) {
  // Q4_0: d = 2.0 (f16 0x4000); byte j = low nibble j, high nibble 15 - j.
  std::vector<uint8_t> q40(18);
  q40[0] = 0x00, q40[1] = 0x40;
  for (int j = 0; j < 16; ++j) q40[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  // Q4_1: d = 0.5 (0x3800), m = -1.0 (0xBC00); same nibbles.
  std::vector<uint8_t> q41(20);
  q41[0] = 0x00, q41[1] = 0x38, q41[2] = 0x00, q41[3] = 0xBC;
  for (int j = 0; j < 16; ++j) q41[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::string path = testing::TempDir("gguf") + "/q4.gguf";
  ASSERT_TRUE(model::WriteGgufFile(path, {{"general.architecture", model::GgufValue::String("x")}},
                                   {{"q40", {32}, model::DType::kQ4_0, q40},
                                    {"q41", {32}, model::DType::kQ4_1, q41}})
                  .ok());
  auto f = model::GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::vector<float> a, b;
  ASSERT_TRUE((*f)->ReadF32(*(*f)->FindTensor("q40"), &a).ok());
  ASSERT_TRUE((*f)->ReadF32(*(*f)->FindTensor("q41"), &b).ok());
  // Element 3: nibble 3 -> (3-8)*2 = -10 and 3*0.5-1 = 0.5. Element 16+3: nibble 12 -> 8 and 5.
  EXPECT_EQ(a[3], -10.0f);
  EXPECT_EQ(a[19], 8.0f);
  EXPECT_EQ(b[3], 0.5f);
  EXPECT_EQ(b[19], 5.0f);
  EXPECT_EQ(a[0], -16.0f);
  EXPECT_EQ(a[16], 14.0f);
  EXPECT_EQ(b[0], -1.0f);
  EXPECT_EQ(b[16], 6.5f);
}

// Every block type decodes to quants within what its layout (and the CPU kernels, gemm.h) allow,
// one scale per sub-block, and values that the layout's formula turns into DequantizeToF32's.
TEST(GgufTest, BlockTypesDecodeIntoTheirLayouts) {
  struct Type {
    model::DType dtype;
    std::vector<int> f16_at;  // byte offsets of the block's f16 fields
    int max_q;
  };
  const std::vector<Type> types = {
      {model::DType::kQ8_0, {0}, 255},   {model::DType::kQ4_0, {0}, 15},
      {model::DType::kQ4_1, {0, 2}, 15}, {model::DType::kQ5_0, {0}, 31},
      {model::DType::kQ5_1, {0, 2}, 31}, {model::DType::kQ2_K, {80, 82}, 3},
      {model::DType::kQ3_K, {108}, 7},   {model::DType::kQ4_K, {0, 2}, 15},
      {model::DType::kQ5_K, {0, 2}, 31}, {model::DType::kQ6_K, {208}, 63},
      {model::DType::kIQ4_NL, {0}, 15},  {model::DType::kIQ4_XS, {0}, 15},  // table indices
  };
  std::mt19937 rng(17);
  for (const Type& t : types) {
    SCOPED_TRACE(std::string(model::DTypeName(t.dtype)));
    const auto layout = model::QuantLayoutOf(t.dtype);
    ASSERT_TRUE(layout.has_value());
    const int64_t block = model::DTypeBlockElements(t.dtype);
    const int64_t n = 2 * std::max<int64_t>(block, 256);
    std::vector<uint8_t> bytes(n / block * model::DTypeBlockBytes(t.dtype));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    for (int64_t off = 0; off < static_cast<int64_t>(bytes.size());
         off += model::DTypeBlockBytes(t.dtype)) {
      for (int at : t.f16_at) {  // finite scales in [-1, 1)
        const uint16_t h = model::F32ToF16(static_cast<float>(static_cast<int>(rng() % 2048) - 1024) / 1024.0f);
        std::memcpy(&bytes[off + at], &h, 2);
      }
    }
    std::vector<uint8_t> q(n, 0xFF);
    std::vector<float> scale(n / layout->sub), min(n / layout->sub);
    model::DecodeQuant(t.dtype, bytes.data(), n, q.data(), scale.data(), min.data());
    int seen_max = 0;
    for (uint8_t v : q) seen_max = std::max<int>(seen_max, v);
    EXPECT_LE(seen_max, t.max_q);
    EXPECT_LT(seen_max, 1 << layout->bits);
    // With 1,000+ random quants every value range is reached.
    EXPECT_EQ(seen_max, t.max_q);
    if (layout->bits == 8) EXPECT_TRUE(layout->offset == 128 && !layout->has_min);
    if (layout->super) {  // the integer form gives the same scales and mins exactly
      const int64_t subs = n / layout->sub;
      std::vector<float> d(n / 256), dmin(n / 256);
      std::vector<int8_t> sc(subs), m(subs);
      const model::SuperScales super{d.data(), layout->has_min ? dmin.data() : nullptr, sc.data(),
                                     layout->has_min ? m.data() : nullptr};
      std::vector<uint8_t> q2(n);
      std::vector<float> scale2(subs), min2(subs);
      model::DecodeQuant(t.dtype, bytes.data(), n, q2.data(), scale2.data(), min2.data(), &super);
      EXPECT_EQ(q2, q);
      for (int64_t s = 0; s < subs; ++s) {
        const int64_t u = s * layout->sub / 256;
        ASSERT_EQ(d[u] * sc[s], scale[s]) << "sub-block " << s;
        if (layout->has_min) ASSERT_EQ(dmin[u] * m[s], min[s]) << "sub-block " << s;
      }
    }
    std::vector<float> ref(n);
    model::DequantizeToF32(t.dtype, bytes.data(), n, ref.data());
    if (layout->table != nullptr) EXPECT_EQ(layout->bits, 4);
    for (int64_t i = 0; i < n; ++i) {
      const float s = scale[i / layout->sub];
      const int qi = layout->table != nullptr ? layout->table[q[i]] : q[i];
      const float v = layout->has_min ? s * static_cast<float>(qi) + min[i / layout->sub]
                                      : s * static_cast<float>(qi - layout->offset);
      ASSERT_EQ(v, ref[i]) << "element " << i;
    }
  }
  EXPECT_FALSE(model::QuantLayoutOf(model::DType::kF16).has_value());
}

TEST(GgufTest, F16AndBf16Conversions) {
  EXPECT_EQ(model::F32ToF16(1.0f), 0x3C00);
  EXPECT_EQ(model::F32ToF16(-2.0f), 0xC000);
  EXPECT_EQ(model::F32ToF16(65504.0f), 0x7BFF);
  EXPECT_EQ(model::F32ToF16(1e6f), 0x7C00);
  EXPECT_EQ(model::F32ToF16(5.9604645e-8f), 0x0001);
  EXPECT_EQ(model::F16ToF32(0x0001), 5.9604645e-8f);
  EXPECT_EQ(model::F16ToF32(0x3555), 0.333251953125f);
  EXPECT_EQ(model::F32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(model::F32ToBf16(1.00390625f), 0x3F80);  // tie rounds to even
  EXPECT_EQ(model::F32ToBf16(1.01171875f), 0x3F82);  // tie rounds to even (up)
  EXPECT_EQ(model::Bf16ToF32(0xC040), -3.0f);
}

class GgufBadFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir("gguf_bad");
    good_ = dir_ + "/good.gguf";
    std::vector<float> w(64, 1.0f);
    ASSERT_TRUE(
        model::WriteGgufFile(good_,
                             {{"general.architecture", model::GgufValue::String("llama")},
                              {"tokens", model::GgufValue::StringArray({"a", "b"})}},
                             {{"blk.0.attn_q.weight", {2, 32}, model::DType::kF32, Bytes(w)}})
            .ok());
    bytes_ = ReadAll(good_);
  }
  Status OpenModified(const std::vector<uint8_t>& bytes) {
    const std::string p = dir_ + "/bad.gguf";
    WriteAll(p, bytes);
    auto f = model::GgufFile::Open(p);
    return f.ok() ? OkStatus() : f.status();
  }
  std::string dir_, good_;
  std::vector<uint8_t> bytes_;
};

TEST_F(GgufBadFileTest, TruncatedAtEveryCutPoint) {
  ASSERT_TRUE(OpenModified(bytes_).ok());
  for (size_t cut : {size_t{0}, size_t{3}, size_t{10}, size_t{30}, size_t{50}, size_t{80},
                     size_t{120}, bytes_.size() - 200, bytes_.size() - 1}) {
    std::vector<uint8_t> b(bytes_.begin(), bytes_.begin() + cut);
    Status s = OpenModified(b);
    ASSERT_FALSE(s.ok()) << "cut " << cut;
    EXPECT_TRUE(Contains(s.message(), "bad.gguf")) << s.message();
    EXPECT_TRUE(Contains(s.message(), "truncated") || Contains(s.message(), "past end"))
        << s.message();
  }
  std::vector<uint8_t> b(bytes_.begin(), bytes_.end() - 1);
  Status s = OpenModified(b);
  EXPECT_TRUE(Contains(s.message(), "blk.0.attn_q.weight")) << s.message();
}

TEST_F(GgufBadFileTest, WrongMagicAndVersion) {
  auto b = bytes_;
  b[0] = 'X';
  Status s = OpenModified(b);
  EXPECT_TRUE(Contains(s.message(), "bad.gguf") && Contains(s.message(), "magic")) << s.message();
  b = bytes_;
  b[4] = 1;
  s = OpenModified(b);
  EXPECT_TRUE(Contains(s.message(), "version 1")) << s.message();
  b[4] = 4;
  EXPECT_FALSE(OpenModified(b).ok());
}

TEST_F(GgufBadFileTest, AbsurdCountsAndLengths) {
  auto b = bytes_;
  b[15] = 0x7F;  // tensor count high byte
  EXPECT_TRUE(Contains(OpenModified(b).message(), "tensor count"));
  b = bytes_;
  b[23] = 0x7F;  // metadata count high byte
  EXPECT_TRUE(Contains(OpenModified(b).message(), "metadata count"));
  b = bytes_;
  b[24 + 7] = 0x10;  // length of the first key
  EXPECT_FALSE(OpenModified(b).ok());
  // The "tokens" array length: key at 24 ("general.architecture" 8+20, type 4, value 8+5) = 69.
  const size_t tokens_len = 69 + 8 + 6 + 4 + 4;
  b = bytes_;
  b[tokens_len + 6] = 0x10;
  Status s = OpenModified(b);
  EXPECT_TRUE(Contains(s.message(), "'tokens'")) << s.message();
}

// Arrays a file really holds could still ask for ~100x the file in memory (each element becomes a
// GgufValue), so the metadata's array elements are budgeted in all, before anything is allocated.
TEST_F(GgufBadFileTest, MetadataArrayElementsAreBudgetedInAll) {
  // Two u8 arrays of 2^22 + 1 elements: each fits the budget of 2^23 elements, both do not.
  const uint64_t n = (uint64_t{1} << 22) + 1;
  std::vector<uint8_t> b;
  auto put = [&b](const void* p, size_t k) {
    b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + k);
  };
  const uint32_t header[2] = {0x46554747, 3};  // "GGUF", version 3
  const uint64_t counts[2] = {0, 2};           // tensors, keys
  put(header, 8);
  put(counts, 16);
  for (const std::string key : {"first", "second"}) {
    const uint64_t len = key.size();
    const uint32_t types[2] = {9, 0};  // array of u8
    put(&len, 8);
    put(key.data(), len);
    put(types, 8);
    put(&n, 8);
    b.resize(b.size() + n, 0);
  }
  Status s = OpenModified(b);
  EXPECT_TRUE(Contains(s.message(), "'second'") && Contains(s.message(), "array elements"))
      << s.message();
}

TEST_F(GgufBadFileTest, UnsupportedTensorTypeNamesTensor) {
  auto b = bytes_;
  // Tensor info: name (8 + 19), n_dims 4, ne 2*8, then type.
  const std::string name = "blk.0.attn_q.weight";
  auto it = std::search(b.begin(), b.end(), name.begin(), name.end());
  ASSERT_NE(it, b.end());
  const size_t type_pos = (it - b.begin()) + name.size() + 4 + 16;
  b[type_pos] = 16;  // IQ2_XXS (not read)
  Status s = OpenModified(b);
  EXPECT_TRUE(Contains(s.message(), "bad.gguf")) << s.message();
  EXPECT_TRUE(Contains(s.message(), name)) << s.message();
  EXPECT_TRUE(Contains(s.message(), "IQ2_XXS")) << s.message();
  // A data offset past EOF.
  b = bytes_;
  b[type_pos + 4 + 5] = 1;
  s = OpenModified(b);
  EXPECT_TRUE(Contains(s.message(), name) && Contains(s.message(), "past end")) << s.message();
}

// A tensor with a zero dimension holds nothing: it reads as empty, whatever its type (a fuzz finding:
// the F32 copy handed memcpy an empty vector's null data pointer, which UBSan reports).
TEST(GgufTest, EmptyTensorsReadAsEmpty) {
  const std::string path = testing::TempDir("gguf") + "/empty.gguf";
  ASSERT_TRUE(model::WriteGgufFile(path, {},
                                   {{"a.f32", {0, 8}, model::DType::kF32, {}},
                                    {"b.f16", {8, 0}, model::DType::kF16, {}}})
                  .ok());
  auto f = model::GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  for (const char* name : {"a.f32", "b.f16"}) {
    const model::GgufTensor* t = (*f)->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->num_elements, 0) << name;
    std::vector<float> fresh, used(3, 1.0f);  // fresh: data() is null
    ASSERT_TRUE((*f)->ReadF32(*t, &fresh).ok()) << name;
    ASSERT_TRUE((*f)->ReadF32(*t, &used).ok()) << name;
    EXPECT_TRUE(fresh.empty() && used.empty()) << name;
  }
}

TEST(GgufWriterTest, RejectsWrongDataSize) {
  model::GgufWriter w;
  w.AddTensor("t", {4}, model::DType::kF32);
  ASSERT_TRUE(w.Open(testing::TempDir("gguf_w") + "/w.gguf").ok());
  float x[2] = {1, 2};
  ASSERT_TRUE(w.WriteTensorData(x, 8).ok());
  Status s = w.Close();
  EXPECT_TRUE(Contains(s.message(), "'t'")) << s.message();
}

}  // namespace
}  // namespace astr
