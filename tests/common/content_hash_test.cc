#include "common/model/content_hash.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/test_util.h"

namespace astr {
namespace {

uint64_t HashOf(const std::string& s) { return model::ContentHash64(s.data(), s.size()); }

std::vector<uint8_t> Bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

// Published XXH64 (seed 0) values: the first three from the xxHash test vectors, the fourth from
// python-xxhash's README; the 1027-byte one was computed with the system's libxxhash 0.8.1
// (XXH64 via ctypes), an independent implementation. The recipe is XXH64, so these must match.
TEST(ContentHashTest, MatchesXxh64Vectors) {
  EXPECT_EQ(model::ContentHashHex(HashOf("")), "ef46db3751d8e999");
  EXPECT_EQ(model::ContentHashHex(HashOf("a")), "d24ec4f1a98c6e5b");
  EXPECT_EQ(model::ContentHashHex(HashOf("abc")), "44bc2cf5ad770999");
  EXPECT_EQ(model::ContentHashHex(HashOf("Nobody inspects the spammish repetition")),
            "fbcea83c8a378bf1");
  std::string long_input;
  for (int rep = 0; rep < 4; ++rep) {
    for (int i = 0; i < 256; ++i) long_input.push_back(static_cast<char>(i));
  }
  long_input += "xyz";
  EXPECT_EQ(model::ContentHashHex(HashOf(long_input)), "e146cb31b65bc21a");
  EXPECT_EQ(model::ContentHashHex(model::ContentHash64("abc", 3, 1)), "bea9ca8199328908");
}

// XXH3-64 values from the independent python `xxhash` package (4.1.0, which bundles xxHash 0.8.4;
// scripts/requirements.txt), e.g. `xxhash.xxh3_64_hexdigest(b"abc", seed=1)`. Pattern(n) is
// `bytes((i * 7 + 3) & 0xFF for i in range(n))`; the lengths reach each of XXH3's code paths
// (0, 1-3, 4-8, 9-16, 17-128, 129-240 and the striped loop past 240 and past a 1024-byte block).
std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 7 + 3) & 0xFF);
  return v;
}

TEST(ContentHashTest, Xxh3MatchesReferenceVectors) {
  auto hex3 = [](const std::string& s, uint64_t seed = 0) {
    return model::ContentHashHex(model::ContentHash3_64(s.data(), s.size(), seed));
  };
  EXPECT_EQ(hex3(""), "2d06800538d394c2");
  EXPECT_EQ(hex3("a"), "e6c632b61e964e1f");
  EXPECT_EQ(hex3("abc"), "78af5f94892f3950");
  EXPECT_EQ(hex3("Nobody inspects the spammish repetition"), "6cb00603b5cc47e9");
  EXPECT_EQ(hex3("abc", 1), "6b4467b443c76228");
  const std::pair<size_t, const char*> kPatternVectors[] = {
      {3, "a9088dda485b481c"},    {8, "60539db630471163"},      {16, "b8c859b0f030b585"},
      {128, "67425a03650261bf"},  {240, "64556dc6b462a6cf"},    {241, "8beadd3a8874fe17"},
      {1027, "867678b37d5d5b1c"}, {100000, "0c056f6fcc340974"},
  };
  for (const auto& [n, expected] : kPatternVectors) {
    const auto data = Pattern(n);
    EXPECT_EQ(model::ContentHashHex(model::ContentHash3_64(data.data(), data.size())), expected)
        << "size " << n;
  }
  EXPECT_EQ(model::ContentHash3_64(nullptr, 0), model::ContentHash3_64("", 0));
}

TEST(ContentHashTest, HexIsSixteenZeroPaddedDigits) {
  EXPECT_EQ(model::ContentHashHex(0), "0000000000000000");
  EXPECT_EQ(model::ContentHashHex(0xABCull), "0000000000000abc");
  EXPECT_EQ(model::ContentHashHex(~0ull), "ffffffffffffffff");
}

TEST(ContentHashTest, EqualContentGivesEqualHash) {
  const auto a = Bytes(1000, 7);
  const auto b = a;  // a separate buffer with the same bytes
  EXPECT_EQ(model::ContentHash64(a.data(), a.size()), model::ContentHash64(b.data(), b.size()));
}

// Sizes around the 32-byte stripe, the 8-byte word and the 4-byte step, so that a flip lands in
// every code path: the stripes, the 8-byte tail, the 4-byte tail and the single bytes.
TEST(ContentHashTest, EveryFlippedByteChangesTheHash) {
  for (size_t n : {1u, 3u, 4u, 7u, 8u, 13u, 31u, 32u, 33u, 63u, 64u, 71u, 100u, 1029u}) {
    auto data = Bytes(n, static_cast<uint32_t>(n));
    const uint64_t base = model::ContentHash64(data.data(), data.size());
    std::set<uint64_t> seen{base};
    for (size_t i = 0; i < n; ++i) {
      data[i] ^= 0x01;
      const uint64_t h = model::ContentHash64(data.data(), data.size());
      EXPECT_NE(h, base) << "size " << n << ", byte " << i;
      seen.insert(h);
      data[i] ^= 0x01;
    }
    EXPECT_EQ(seen.size(), n + 1) << "size " << n << ": two flips collided";
  }
}

TEST(ContentHashTest, LengthMatters) {
  const auto data = std::vector<uint8_t>(100, 0);  // zeros: only the length tells them apart
  std::set<uint64_t> seen;
  for (size_t n = 0; n <= data.size(); ++n) seen.insert(model::ContentHash64(data.data(), n));
  EXPECT_EQ(seen.size(), data.size() + 1);
}

TEST(ContentHashTest, SingleFileHashIsTheHashOfItsBytes) {
  const std::string dir = testing::TempDir("content_hash");
  const std::string path = dir + "/model.gguf";
  WriteFile(path, "GGUF and some weights");
  auto h = model::ModelContentHash(path);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(*h, model::ContentHashHex(HashOf("GGUF and some weights")));
  auto missing = model::ModelContentHash(dir + "/absent.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("absent.gguf"), std::string::npos);
}

class FolderHashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir("content_hash_folder");
    WriteFile(dir_ + "/config.json", "{\"model_type\": \"llama\"}");
    WriteFile(dir_ + "/model-00001-of-00002.safetensors", "first shard");
    WriteFile(dir_ + "/model-00002-of-00002.safetensors", "second shard");
  }
  std::string Hash() {
    auto h = model::ModelContentHash(dir_);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    return h.ok() ? *h : "";
  }
  std::string dir_;
};

// The published format-1 folder hash, computed in Python from the recipe in content_hash.h:
// XXH64 over b"".join(name + b"\0" + struct.pack("<QQ", len(data), xxhash.xxh64_intdigest(data)))
// for config.json and then the shards in name order. A change of the recipe must fail here.
TEST_F(FolderHashTest, MatchesThePublishedFormat) { EXPECT_EQ(Hash(), "239f052ab50c5194"); }

TEST_F(FolderHashTest, StableAndIgnoresOtherFiles) {
  const std::string base = Hash();
  EXPECT_EQ(base.size(), 16u);
  EXPECT_EQ(Hash(), base);
  WriteFile(dir_ + "/tokenizer.json", "{}");
  WriteFile(dir_ + "/README.md", "readme");
  EXPECT_EQ(Hash(), base);
}

TEST_F(FolderHashTest, ContentOfEveryHashedFileMatters) {
  const std::string base = Hash();
  WriteFile(dir_ + "/config.json", "{\"model_type\": \"llamb\"}");
  EXPECT_NE(Hash(), base);
  const std::string after_config = Hash();
  WriteFile(dir_ + "/model-00002-of-00002.safetensors", "second shard!");
  EXPECT_NE(Hash(), after_config);
}

// Swapping the contents of two shards keeps the multiset of bytes but changes which file holds
// what: the hash must see the order.
TEST_F(FolderHashTest, FileOrderMatters) {
  const std::string base = Hash();
  WriteFile(dir_ + "/model-00001-of-00002.safetensors", "second shard");
  WriteFile(dir_ + "/model-00002-of-00002.safetensors", "first shard");
  EXPECT_NE(Hash(), base);
}

// The same bytes split differently between two shards (file boundaries move) change the hash.
TEST_F(FolderHashTest, FileBoundariesMatter) {
  WriteFile(dir_ + "/model-00001-of-00002.safetensors", "ab");
  WriteFile(dir_ + "/model-00002-of-00002.safetensors", "cd");
  const std::string base = Hash();
  WriteFile(dir_ + "/model-00001-of-00002.safetensors", "abc");
  WriteFile(dir_ + "/model-00002-of-00002.safetensors", "d");
  EXPECT_NE(Hash(), base);
}

TEST_F(FolderHashTest, NamesMatter) {
  const std::string base = Hash();
  std::filesystem::rename(dir_ + "/model-00002-of-00002.safetensors",
                          dir_ + "/model-00003-of-00002.safetensors");
  EXPECT_NE(Hash(), base);
}

TEST_F(FolderHashTest, MissingPiecesAreErrors) {
  std::filesystem::remove(dir_ + "/config.json");
  auto no_config = model::ModelContentHash(dir_);
  ASSERT_FALSE(no_config.ok());
  EXPECT_NE(no_config.status().message().find("config.json"), std::string::npos);
  const std::string empty = testing::TempDir("content_hash_empty");
  WriteFile(empty + "/config.json", "{}");
  auto no_weights = model::ModelContentHash(empty);
  ASSERT_FALSE(no_weights.ok());
  EXPECT_NE(no_weights.status().message().find("safetensors"), std::string::npos);
}

}  // namespace
}  // namespace astr
