// Invalid UTF-8 in a request's string fields, found before protobuf parses the request.
//
// protobuf 3.21 C++ refuses to parse a proto3 `string` field that holds invalid UTF-8, and the
// gRPC sync server then answers INTERNAL with an empty message without calling the handler (it
// only logs "String field 'astr.v1.GenerateRequest.text' contains invalid UTF-8 data" on the
// server). Clients need INVALID_ARGUMENT naming the field, so the request's wire bytes are walked
// first with the message's descriptor; a bad string is reported by its field path
// ("chat.messages[1].content: invalid UTF-8").
#pragma once

#include <google/protobuf/descriptor.h>

#include <string_view>

#include "common/base/status.h"

namespace astr::front {

// INVALID_ARGUMENT naming the first string field (in wire order) of `wire`, read as a `type`
// message, that is not valid UTF-8. OK when every string is valid, and also when the bytes are
// not a well-formed message (the parser reports that).
Status CheckWireUtf8(const google::protobuf::Descriptor& type, std::string_view wire);

}  // namespace astr::front
