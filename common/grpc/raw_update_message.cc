#include "common/grpc/raw_update_message.h"

#include <vector>

namespace astr {
namespace {

// Reads protobuf wire format across the slices of a ByteBuffer.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices) : slices_(slices) { Skip0(); }

  uint64_t position() const { return position_; }
  bool done() const { return slice_ >= slices_.size(); }

  bool Byte(uint8_t* b) {
    if (done()) return false;
    *b = slices_[slice_].begin()[at_];
    Advance(1);
    return true;
  }

  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;  // more than 10 bytes
  }

  // The next n bytes as pieces pointing into the slices (appended to `pieces`).
  bool Take(uint64_t n, std::vector<std::span<const uint8_t>>* pieces) {
    while (n > 0) {
      if (done()) return false;
      const grpc::Slice& s = slices_[slice_];
      const uint64_t here = std::min<uint64_t>(n, s.size() - at_);
      if (pieces != nullptr) pieces->emplace_back(s.begin() + at_, static_cast<size_t>(here));
      Advance(here);
      n -= here;
    }
    return true;
  }

 private:
  void Advance(uint64_t n) {
    at_ += n;
    position_ += n;
    Skip0();
  }
  // Moves past finished (and empty) slices.
  void Skip0() {
    while (slice_ < slices_.size() && at_ >= slices_[slice_].size()) {
      ++slice_;
      at_ = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  size_t slice_ = 0;
  uint64_t at_ = 0;
  uint64_t position_ = 0;
};

Status Malformed(const std::string& what) {
  return InvalidArgumentError("malformed UpdateWeightsRequest: " + what);
}

// Skips a field of `wire_type` whose tag was read.
bool SkipField(SliceReader& r, uint64_t wire_type) {
  uint64_t v;
  switch (wire_type) {
    case 0:
      return r.Varint(&v);
    case 1:
      return r.Take(8, nullptr);
    case 2:
      return r.Varint(&v) && r.Take(v, nullptr);
    case 5:
      return r.Take(4, nullptr);
    default:
      return false;  // groups (3, 4) are not proto3
  }
}

}  // namespace

Status ParseRawUpdateMessage(
    const grpc::ByteBuffer& message, RawUpdateMessage* out,
    const std::function<Status(int32_t tensor, int64_t offset, ChunkPieces pieces)>& chunk) {
  std::vector<grpc::Slice> slices;
  if (!message.Dump(&slices).ok()) return Malformed("unreadable message");
  SliceReader r(slices);
  std::vector<std::span<const uint8_t>> data;
  while (!r.done()) {
    uint64_t tag;
    if (!r.Varint(&tag)) return Malformed("a truncated field tag");
    const uint64_t field = tag >> 3, wire = tag & 7;
    if (field == 1 && wire == 2) {  // manifest
      uint64_t n;
      std::vector<std::span<const uint8_t>> pieces;
      if (!r.Varint(&n) || !r.Take(n, &pieces)) return Malformed("a truncated manifest");
      std::string bytes;
      bytes.reserve(static_cast<size_t>(n));
      for (const auto& p : pieces) bytes.append(reinterpret_cast<const char*>(p.data()), p.size());
      // Like protobuf, a second occurrence merges into the first.
      if (!out->manifest.MergeFromString(bytes)) return Malformed("the manifest does not parse");
      out->has_manifest = true;
    } else if (field == 2 && wire == 2) {  // chunks
      uint64_t n;
      if (!r.Varint(&n)) return Malformed("a truncated chunk");
      const uint64_t end = r.position() + n;
      uint64_t tensor = 0, offset = 0;
      data.clear();
      while (r.position() < end) {
        uint64_t ctag;
        if (!r.Varint(&ctag)) return Malformed("a truncated chunk field");
        const uint64_t cfield = ctag >> 3, cwire = ctag & 7;
        bool ok;
        if (cfield == 1 && cwire == 0) {
          ok = r.Varint(&tensor);
        } else if (cfield == 2 && cwire == 0) {
          ok = r.Varint(&offset);
        } else if (cfield == 3 && cwire == 2) {
          uint64_t len;
          data.clear();  // the last occurrence of a bytes field wins
          ok = r.Varint(&len) && r.Take(len, &data);
        } else {
          ok = SkipField(r, cwire);
        }
        if (!ok || r.position() > end) return Malformed("a chunk runs past its length");
      }
      // int32 / int64 as protobuf reads them: the low 32 bits, two's complement.
      ASTR_RETURN_IF_ERROR(chunk(static_cast<int32_t>(static_cast<uint32_t>(tensor)),
                                 static_cast<int64_t>(offset), data));
    } else if (!SkipField(r, wire)) {
      return Malformed("field " + std::to_string(field) + " is truncated or of wire type " +
                       std::to_string(wire));
    }
  }
  return OkStatus();
}

}  // namespace astr
