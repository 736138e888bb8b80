#include "scheduler/front/utf8_check.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <map>
#include <string>

#include "common/text/unicode/unicode.h"

namespace astr::front {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;

// Deeper nesting than this is left to the parser (its own recursion limit is 100).
constexpr int kMaxDepth = 64;

struct Walker {
  std::string_view wire;
  bool malformed = false;

  // Walks one message that fills `in` up to its current limit. `prefix`: the path of the message
  // ("" at the top, "chat." inside).
  Status Walk(const Descriptor& type, google::protobuf::io::CodedInputStream* in,
              const std::string& prefix, int depth) {
    std::map<int, int> seen;  // repeated field number -> entries walked so far
    while (!malformed) {
      const uint32_t tag = in->ReadTag();
      if (tag == 0) return OkStatus();  // end of the message (or of its limit)
      const FieldDescriptor* f = type.FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
      const bool delimited =
          WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
      if (f == nullptr || !delimited ||
          (f->type() != FieldDescriptor::TYPE_STRING &&
           f->type() != FieldDescriptor::TYPE_MESSAGE)) {
        if (!WireFormatLite::SkipField(in, tag)) malformed = true;
        continue;
      }
      std::string path = prefix + f->name();
      if (f->is_repeated()) path += "[" + std::to_string(seen[f->number()]++) + "]";
      uint32_t len = 0;
      if (!in->ReadVarint32(&len) || len > wire.size()) {
        malformed = true;
        break;
      }
      const size_t at = static_cast<size_t>(in->CurrentPosition());
      if (f->type() == FieldDescriptor::TYPE_STRING) {
        if (at + len > wire.size() || !in->Skip(static_cast<int>(len))) {
          malformed = true;
          break;
        }
        if (!unicode::IsValidUtf8(wire.substr(at, len))) {
          return FieldError(path, ": invalid UTF-8");
        }
        continue;
      }
      if (depth >= kMaxDepth) {
        if (!in->Skip(static_cast<int>(len))) malformed = true;
        continue;
      }
      const auto limit = in->PushLimit(static_cast<int>(len));
      ASTR_RETURN_IF_ERROR(Walk(*f->message_type(), in, path + ".", depth + 1));
      if (malformed || !in->ConsumedEntireMessage() || in->BytesUntilLimit() != 0) {
        malformed = true;
        break;
      }
      in->PopLimit(limit);
    }
    return OkStatus();
  }
};

}  // namespace

Status CheckWireUtf8(const Descriptor& type, std::string_view wire) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(wire.data()),
                                            static_cast<int>(wire.size()));
  Walker walker{wire};
  return walker.Walk(type, &in, "", 0);
}

}  // namespace astr::front
