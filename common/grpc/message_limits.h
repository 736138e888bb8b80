// The largest gRPC message astr's channels carry, on every side of them (gRPC's default of 4 MiB
// is too small): a scheduler -> worker SequenceStart holds a whole prompt, an admin or worker
// weight update a bucket, a client's response a long generation with top-n logprobs. The public
// scheduler port's receive limit is the operator's (--max-message-mb).
#pragma once

namespace astr::rpc {

inline constexpr int kMaxMessageBytes = 256 << 20;

}  // namespace astr::rpc
