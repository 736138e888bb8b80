#include "worker/backends/cuda/cuda_graphs.h"

#include <algorithm>
#include <string>

#include "common/base/logging.h"
#include "worker/backends/cuda/device_memory.h"

namespace astr::cuda {

std::vector<int> GraphBuckets(int max_batch) {
  std::vector<int> b;
  for (int s = 1; s < max_batch; s *= 2) b.push_back(s);
  if (max_batch >= 1) b.push_back(max_batch);
  return b;
}

int BucketFor(int batch, const std::vector<int>& buckets) {
  if (batch < 1) return -1;
  auto it = std::lower_bound(buckets.begin(), buckets.end(), batch);
  return it == buckets.end() ? -1 : *it;
}

CudaGraphContext::CudaGraphContext(std::vector<int> buckets, bool enabled)
    : buckets_(std::move(buckets)),
      enabled_(enabled),
      execs_(buckets_.size(), nullptr),
      failed_(buckets_.size(), 0) {}

CudaGraphContext::~CudaGraphContext() {
  for (cudaGraphExec_t e : execs_) {
    if (e != nullptr) cudaGraphExecDestroy(e);
  }
}

int CudaGraphContext::captured() const {
  return static_cast<int>(
      std::count_if(execs_.begin(), execs_.end(), [](cudaGraphExec_t e) { return e != nullptr; }));
}

Status CudaGraphContext::Run(int bucket, cudaStream_t stream,
                             const std::function<Status(cudaStream_t)>& enqueue) {
  const auto it = std::find(buckets_.begin(), buckets_.end(), bucket);
  if (!enabled_ || it == buckets_.end()) return enqueue(stream);
  const size_t index = static_cast<size_t>(it - buckets_.begin());
  if (failed_[index]) return enqueue(stream);
  cudaGraphExec_t& exec = execs_[index];
  if (exec != nullptr) {
    ASTR_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, stream), "replaying the decode graph");
    ++replays_;
    return OkStatus();
  }
  // Live run first: its results are this step's, and any lazy initialisation (cuBLASLt kernels,
  // module loading) happens here rather than inside the capture.
  ASTR_RETURN_IF_ERROR(enqueue(stream));
  // A bucket that cannot be captured runs eagerly from now on; the step itself already succeeded.
  auto eager_from_now = [&](const std::string& why) {
    (void)cudaGetLastError();  // do not let the failed call surface in a later launch
    failed_[index] = 1;
    LOG(WARNING) << "no CUDA graph for decode batch " << bucket << " (" << why
                 << "); running it eagerly";
    return OkStatus();
  };
  // Relaxed: the kernel launchers may call cudaFuncSetAttribute (not stream-ordered) while being
  // captured. Nothing in the enqueue allocates (DeviceAllocator's count is checked by the tests).
  if (cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
      e != cudaSuccess) {
    return eager_from_now(std::string("begin capture: ") + cudaGetErrorString(e));
  }
  const Status captured = enqueue(stream);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (!captured.ok() || end != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return eager_from_now(!captured.ok() ? captured.message()
                                         : std::string("end capture: ") + cudaGetErrorString(end));
  }
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (inst != cudaSuccess) {
    exec = nullptr;
    return eager_from_now(std::string("instantiate: ") + cudaGetErrorString(inst));
  }
  // Upload now, so the first replay does not allocate the graph's device resources. A failed
  // upload leaves no half-made exec behind: it is destroyed and the bucket runs eagerly.
  if (const cudaError_t up = cudaGraphUpload(exec, stream); up != cudaSuccess) {
    cudaGraphExecDestroy(exec);
    exec = nullptr;
    return eager_from_now(std::string("upload: ") + cudaGetErrorString(up));
  }
  return OkStatus();
}

}  // namespace astr::cuda
