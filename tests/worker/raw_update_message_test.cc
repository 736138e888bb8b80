// ParseRawUpdateMessage (worker/service/raw_update_message.h) against protobuf's own serializer:
// messages protobuf wrote, cut into slices at every kind of boundary (inside a tag, a varint, a
// chunk's data), parse to the same manifest and chunks; so do non-canonical encodings protobuf
// accepts (fields out of order, unknown fields, a repeated scalar); malformed ones are refused.
#include "common/grpc/raw_update_message.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace astr {
namespace {

struct Chunk {
  int32_t tensor;
  int64_t offset;
  std::string data;
  bool operator==(const Chunk&) const = default;
};

// `bytes` as a ByteBuffer cut at `cuts` (offsets, ascending).
grpc::ByteBuffer Cut(const std::string& bytes, std::vector<size_t> cuts) {
  cuts.push_back(bytes.size());
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  for (size_t c : cuts) {
    slices.emplace_back(bytes.data() + at, c - at);  // copies: owned slices
    at = c;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

Status Parse(const grpc::ByteBuffer& b, RawUpdateMessage* m, std::vector<Chunk>* chunks) {
  return ParseRawUpdateMessage(b, m, [&](int32_t t, int64_t o, ChunkPieces pieces) {
    std::string data;
    for (const auto& p : pieces) data.append(reinterpret_cast<const char*>(p.data()), p.size());
    chunks->push_back({t, o, data});
    return OkStatus();
  });
}

v1::UpdateWeightsRequest Sample() {
  v1::UpdateWeightsRequest r;
  auto* spec = r.mutable_manifest()->add_tensors();
  spec->set_name("model.layers.0.self_attn.q_proj.weight");
  spec->set_dtype("bf16");
  spec->add_shape(64);
  spec->add_shape(64);
  spec->set_xxh64(0x1234567890abcdefULL);
  r.mutable_manifest()->set_label("step-3");
  std::mt19937 rng(7);
  for (int i = 0; i < 4; ++i) {
    auto* c = r.add_chunks();
    c->set_tensor(i == 3 ? 0 : 300 * i);  // 0 is not written by protobuf (proto3 default)
    c->set_offset(int64_t{1} << (10 * i));
    std::string data(i == 2 ? 0 : 200 + 37 * i, '\0');
    for (char& ch : data) ch = static_cast<char>(rng());
    c->set_data(data);
  }
  return r;
}

std::vector<Chunk> ChunksOf(const v1::UpdateWeightsRequest& r) {
  std::vector<Chunk> out;
  for (const auto& c : r.chunks()) out.push_back({c.tensor(), c.offset(), c.data()});
  return out;
}

TEST(RawUpdateMessageTest, EveryCutOfAProtobufMessageParsesToTheSameFields) {
  const v1::UpdateWeightsRequest want = Sample();
  const std::string bytes = want.SerializeAsString();
  for (size_t a = 0; a < bytes.size(); a += 3) {
    for (size_t b = a; b < bytes.size(); b += 29) {
      RawUpdateMessage got;
      std::vector<Chunk> chunks;
      ASSERT_TRUE(Parse(Cut(bytes, {a, b}), &got, &chunks).ok()) << a << " " << b;
      ASSERT_TRUE(got.has_manifest);
      EXPECT_EQ(got.manifest.SerializeAsString(), want.manifest().SerializeAsString());
      EXPECT_EQ(chunks, ChunksOf(want)) << "cut at " << a << ", " << b;
    }
  }
  // One byte per slice.
  std::vector<size_t> every;
  for (size_t i = 1; i < bytes.size(); ++i) every.push_back(i);
  RawUpdateMessage got;
  std::vector<Chunk> chunks;
  ASSERT_TRUE(Parse(Cut(bytes, every), &got, &chunks).ok());
  EXPECT_EQ(chunks, ChunksOf(want));
}

TEST(RawUpdateMessageTest, NonCanonicalEncodingsParseAsProtobufReadsThem) {
  // A chunk with data first, then offset, tensor written twice (the last wins), an unknown
  // varint field and an unknown length-delimited field; an unknown field in the message too.
  std::string chunk;
  chunk += '\x1a';  // data
  chunk += '\x03';
  chunk += "abc";
  chunk += '\x10';  // offset 5
  chunk += '\x05';
  chunk += '\x08';  // tensor 1
  chunk += '\x01';
  chunk += '\x38';  // field 7, varint 300
  chunk += "\xac\x02";
  chunk += '\x42';  // field 8, 2 bytes
  chunk += "\x02xy";
  chunk += '\x08';  // tensor 2
  chunk += '\x02';
  std::string message;
  message += '\x62';  // field 12, 1 byte
  message += "\x01z";
  message += '\x12';
  message += static_cast<char>(chunk.size());
  message += chunk;
  v1::UpdateWeightsRequest oracle;
  ASSERT_TRUE(oracle.ParseFromString(message));
  RawUpdateMessage got;
  std::vector<Chunk> chunks;
  ASSERT_TRUE(Parse(Cut(message, {4, 9}), &got, &chunks).ok());
  EXPECT_FALSE(got.has_manifest);
  EXPECT_EQ(chunks, ChunksOf(oracle));
  EXPECT_EQ(chunks, (std::vector<Chunk>{{2, 5, "abc"}}));
}

TEST(RawUpdateMessageTest, MalformedMessagesAreRefusedNamingWhat) {
  const std::string bytes = Sample().SerializeAsString();
  for (size_t cut : {size_t{1}, bytes.size() / 2, bytes.size() - 1}) {
    RawUpdateMessage got;
    std::vector<Chunk> chunks;
    const Status s = Parse(Cut(bytes.substr(0, cut), {}), &got, &chunks);
    ASSERT_FALSE(s.ok()) << cut;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("malformed UpdateWeightsRequest"), std::string::npos)
        << s.ToString();
  }
  // A group (wire type 3) is not proto3; a chunk whose field runs past the chunk's length.
  for (const std::string& bad : {std::string("\x0b", 1), std::string("\x12\x02\x1a\x05xxxxx", 9)}) {
    RawUpdateMessage got;
    std::vector<Chunk> chunks;
    EXPECT_FALSE(Parse(Cut(bad, {}), &got, &chunks).ok());
  }
  // A callback's error is returned as it is.
  RawUpdateMessage got;
  const Status s = ParseRawUpdateMessage(Cut(bytes, {}), &got, [](int32_t, int64_t, ChunkPieces) {
    return DataLossError("from the stager");
  });
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace astr
