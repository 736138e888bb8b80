#include "common/model/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/support/test_util.h"

namespace astr {
namespace {

std::vector<uint8_t> F32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
bool Contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// A safetensors file written byte by byte from a header text (independent of our writer).
void WriteRaw(const std::string& path, const std::string& header,
              const std::vector<uint8_t>& data) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), data.size());
}

TEST(SafetensorsTest, SingleFileRoundTrip) {
  const std::string dir = testing::TempDir("st");
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint8_t> h = {0x00, 0x3C, 0x00, 0xC0};  // f16 1, -2
  std::vector<uint8_t> bf = {0x80, 0x3F};             // bf16 1
  ASSERT_TRUE(model::WriteSafetensorsFile(dir + "/model.safetensors",
                                          {{"a", {2, 3}, model::DType::kF32, F32Bytes(a)},
                                           {"h", {2}, model::DType::kF16, h},
                                           {"b", {1, 1}, model::DType::kBF16, bf}})
                  .ok());
  auto f = model::SafetensorsFile::Open(dir);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ((*f)->tensors().size(), 3u);
  const model::SafetensorsTensor* t = (*f)->Find("a");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*t->dtype, model::DType::kF32);
  EXPECT_EQ(std::memcmp(t->data, a.data(), 24), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 8, 0u);  // header padded to 8 bytes
  t = (*f)->Find("h");
  EXPECT_EQ(t->dtype_name, "F16");
  EXPECT_EQ(std::memcmp(t->data, h.data(), 4), 0);
  EXPECT_EQ((*f)->Find("b")->shape, (std::vector<int64_t>{1, 1}));
}

TEST(SafetensorsTest, ReadsHandWrittenFileAndUnsupportedDtype) {
  const std::string path = testing::TempDir("st") + "/x.safetensors";
  std::vector<uint8_t> data = F32Bytes({7, 8});
  data.resize(16, 0);
  WriteRaw(
      path,
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("ids":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}})",
      data);
  auto f = model::SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  const model::SafetensorsTensor* ids = (*f)->Find("ids");
  ASSERT_NE(ids, nullptr);
  auto d = (*f)->ReadableDType(*ids);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(Contains(d.status().message(), "'ids'") && Contains(d.status().message(), "I64"));
  float w[2];
  std::memcpy(w, (*f)->Find("w")->data, 8);
  EXPECT_EQ(w[1], 8.0f);
}

TEST(SafetensorsTest, ShardedRoundTrip) {
  const std::string dir = testing::TempDir("st_shard");
  ASSERT_TRUE(model::WriteSafetensorsFile(dir + "/model-00001-of-00002.safetensors",
                                          {{"x", {2}, model::DType::kF32, F32Bytes({1, 2})}})
                  .ok());
  ASSERT_TRUE(model::WriteSafetensorsFile(dir + "/model-00002-of-00002.safetensors",
                                          {{"y", {1}, model::DType::kF32, F32Bytes({3})}})
                  .ok());
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"metadata":{},"weight_map":{"x":"model-00001-of-00002.safetensors",)"
      << R"("y":"model-00002-of-00002.safetensors"}})";
  auto f = model::SafetensorsFile::Open(dir);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ((*f)->tensors().size(), 2u);
  float y;
  std::memcpy(&y, (*f)->Find("y")->data, 4);
  EXPECT_EQ(y, 3.0f);
  EXPECT_TRUE(Contains((*f)->Find("y")->file, "00002"));
  // The index naming the wrong shard for a tensor.
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"weight_map":{"x":"model-00002-of-00002.safetensors"}})";
  auto bad = model::SafetensorsFile::Open(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status().message(), "'x'")) << bad.status().message();
}

TEST(SafetensorsTest, BadHeaders) {
  const std::string dir = testing::TempDir("st_bad");
  const std::vector<uint8_t> data(8, 0);
  struct Case {
    std::string header;
    std::string expect;
  } cases[] = {
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", "JSON"},   // malformed
      {R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "'w'"},   // size mismatch
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "'w'"},  // past the data
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", "'w'"},   // reversed
      {R"({"w":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})", "'w'"},    // unknown dtype
      {R"({"w":{"shape":[2],"data_offsets":[0,8]}})", "'w'"},                 // missing dtype
      {R"([1,2])", "JSON"},
      // 9 dims of 2 elements in all: consistent, but longer than any tensor's shape (each dim
      // costs memory however little data the file has).
      {R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,2],"data_offsets":[0,8]}})", "9 dims"},
  };
  for (const Case& c : cases) {
    const std::string path = dir + "/bad.safetensors";
    WriteRaw(path, c.header, data);
    auto f = model::SafetensorsFile::Open(path);
    ASSERT_FALSE(f.ok()) << c.header;
    EXPECT_TRUE(Contains(f.status().message(), "bad.safetensors")) << f.status().message();
    EXPECT_TRUE(Contains(f.status().message(), c.expect)) << f.status().message();
  }
  // Header size larger than the file, and a file too short for the size.
  const std::string path = dir + "/short.safetensors";
  std::ofstream(path, std::ios::binary) << "\xff\xff\x00\x00\x00\x00\x00\x00{}";
  auto f = model::SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(Contains(f.status().message(), "short.safetensors"));
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_FALSE(model::SafetensorsFile::Open(path).ok());
}

TEST(SafetensorsTest, HeaderOverTheReferenceLimitIsRefusedUnread) {
  // huggingface/safetensors refuses headers over 100,000,000 bytes; the file is sparse.
  const std::string path = testing::TempDir("st_big") + "/big.safetensors";
  const uint64_t header_bytes = 100'000'001;
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(&header_bytes), sizeof(header_bytes));
  std::filesystem::resize_file(path, 8 + header_bytes);
  auto f = model::SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(Contains(f.status().message(), "header size 100000001 is more than"))
      << f.status().message();
}

}  // namespace
}  // namespace astr
