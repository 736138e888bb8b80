// SamplingParams (common/base/sampling_params.h) <-> the worker stream's WorkerSamplingParams:
// the scheduler front writes it, the worker reads it back. Neither direction validates; both
// sides call ValidateSamplingParams on the plain struct.
#pragma once

#include "astr/v1/worker.pb.h"
#include "common/base/sampling_params.h"

namespace astr::rpc {

// RAW for UNSPECIFIED and RAW, PROCESSED for PROCESSED. Any other value is passed through as an
// out-of-range LogprobsMode holding the same number, which ValidateSamplingParams refuses naming
// it.
LogprobsMode LogprobsModeFromProto(int mode);

// Every field; max_tokens is not on the worker stream (the scheduler counts the length) and is
// set to max(1, min_tokens), the smallest value validation accepts. The sampler reads it only as
// a size hint for its penalty counts (which grow when outrun).
SamplingParams FromWorkerProto(const v1::WorkerSamplingParams& p);
// Every field but max_tokens, which the scheduler keeps.
void ToWorkerProto(const SamplingParams& s, v1::WorkerSamplingParams* out);

}  // namespace astr::rpc
