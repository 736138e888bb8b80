// UpdateWeightsRequest messages (admin.proto) parsed straight from the bytes gRPC received: the
// worker's StageWeights reads each message as a grpc::ByteBuffer and hands every chunk's data to
// the stager where it lies in the received slices, instead of protobuf copying it into a string
// first (one copy of the update fewer); the scheduler's UpdateWeights reads the manifest and
// counts the bytes this way and forwards the received buffers to the workers as they are.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "astr/v1/admin.pb.h"
#include "common/base/status.h"

namespace astr {

struct RawUpdateMessage {
  bool has_manifest = false;
  v1::WeightManifest manifest;
};

// One chunk's data, in the pieces it lies in (consecutive bytes of the chunk, in order).
using ChunkPieces = std::span<const std::span<const uint8_t>>;

// Parses one UpdateWeightsRequest as protobuf does (fields in any order, unknown fields skipped,
// the last of a repeated scalar wins), calling `chunk(tensor, offset, pieces)` for each
// WeightChunk in order. INVALID_ARGUMENT naming what is malformed; a `chunk` error is returned as
// it is. The pieces point into `message`, valid during the call.
Status ParseRawUpdateMessage(
    const grpc::ByteBuffer& message, RawUpdateMessage* out,
    const std::function<Status(int32_t tensor, int64_t offset, ChunkPieces pieces)>& chunk);

}  // namespace astr
