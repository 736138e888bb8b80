#include "worker/backends/cuda/releasable_memory.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <mutex>

#include "worker/backends/cuda/device_memory.h"

namespace astr::cuda {
namespace {

struct Vmm {
  bool ok = false;
  std::string why;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
};

const Vmm& Driver() {
  static Vmm vmm;
  static std::once_flag once;
  std::call_once(once, [] {
    const auto get = [](const char* name, auto* fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult status{};
      if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &status) !=
              cudaSuccess ||
          status != cudaDriverEntryPointSuccess || p == nullptr) {
        vmm.why = std::string("the CUDA driver has no ") + name;
        return false;
      }
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(p);
      return true;
    };
    vmm.ok = get("cuMemGetAllocationGranularity", &vmm.granularity) &&
             get("cuMemAddressReserve", &vmm.reserve) &&
             get("cuMemAddressFree", &vmm.address_free) && get("cuMemCreate", &vmm.create) &&
             get("cuMemRelease", &vmm.release) && get("cuMemMap", &vmm.map) &&
             get("cuMemSetAccess", &vmm.set_access) && get("cuMemUnmap", &vmm.unmap);
  });
  return vmm;
}

CUmemAllocationProp Prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

Status DriverStatus(CUresult r, const std::string& what) {
  const std::string message = what + ": CUDA driver error " + std::to_string(static_cast<int>(r));
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return ResourceExhaustedError(message + " (out of memory)");
  return InternalError(message);
}

// Chunks are mapped at least this large, so that a model's many small buffers share a few.
constexpr size_t kMinChunk = size_t{64} << 20;

}  // namespace

StatusOr<std::unique_ptr<ReleasableArena>> ReleasableArena::Create(size_t reserve_bytes,
                                                                   std::string what) {
  const Vmm& d = Driver();
  if (!d.ok) return UnimplementedError(d.why);
  auto arena = std::unique_ptr<ReleasableArena>(new ReleasableArena());
  arena->what_ = std::move(what);
  ASTR_CUDA_RETURN_IF_ERROR(cudaGetDevice(&arena->device_), "cudaGetDevice");
  const CUmemAllocationProp prop = Prop(arena->device_);
  size_t g = 0;
  if (CUresult r = d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
      r != CUDA_SUCCESS || g == 0) {
    return DriverStatus(r, "the allocation granularity for " + arena->what_);
  }
  arena->granularity_ = g;
  arena->reserved_ = (std::max<size_t>(reserve_bytes, 1) + g - 1) / g * g;
  CUdeviceptr base = 0;
  if (CUresult r = d.reserve(&base, arena->reserved_, 0, 0, 0); r != CUDA_SUCCESS) {
    return DriverStatus(r, "reserving " + std::to_string(arena->reserved_) +
                               " bytes of addresses for " + arena->what_);
  }
  arena->base_ = static_cast<uintptr_t>(base);
  return arena;
}

ReleasableArena::~ReleasableArena() {
  const Vmm& d = Driver();
  if (base_ == 0) return;
  cudaDeviceSynchronize();
  for (Chunk& c : chunks_) {
    if (!released_) d.unmap(static_cast<CUdeviceptr>(base_ + c.offset), c.bytes);
    if (c.handle != 0 && !released_) d.release(static_cast<CUmemGenericAllocationHandle>(c.handle));
  }
  d.address_free(static_cast<CUdeviceptr>(base_), reserved_);
}

Status ReleasableArena::MapChunk(Chunk* c) {
  const Vmm& d = Driver();
  const CUmemAllocationProp prop = Prop(device_);
  CUmemGenericAllocationHandle handle = 0;
  if (CUresult r = d.create(&handle, c->bytes, &prop, 0); r != CUDA_SUCCESS) {
    return DriverStatus(r, "allocating " + std::to_string(c->bytes) + " bytes for " + what_);
  }
  const CUdeviceptr at = static_cast<CUdeviceptr>(base_ + c->offset);
  if (CUresult r = d.map(at, c->bytes, 0, handle, 0); r != CUDA_SUCCESS) {
    d.release(handle);
    return DriverStatus(r, "mapping memory for " + what_);
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (CUresult r = d.set_access(at, c->bytes, &access, 1); r != CUDA_SUCCESS) {
    d.unmap(at, c->bytes);
    d.release(handle);
    return DriverStatus(r, "enabling access to " + what_);
  }
  c->handle = static_cast<unsigned long long>(handle);
  return OkStatus();
}

StatusOr<void*> ReleasableArena::Take(size_t bytes) {
  if (released_) return FailedPreconditionError(what_ + " is released");
  const size_t start = (used_ + 255) / 256 * 256;
  const size_t end = start + std::max<size_t>(bytes, 1);
  if (end > reserved_) {
    return ResourceExhaustedError(what_ + ": " + std::to_string(end) + " bytes exceed the " +
                                  std::to_string(reserved_) + " reserved");
  }
  if (end > mapped_) {
    Chunk c;
    c.offset = mapped_;
    c.bytes = std::max(end - mapped_, kMinChunk);
    c.bytes = (c.bytes + granularity_ - 1) / granularity_ * granularity_;
    c.bytes = std::min(c.bytes, reserved_ - mapped_);
    ASTR_RETURN_IF_ERROR(MapChunk(&c));
    chunks_.push_back(c);
    mapped_ += c.bytes;
  }
  used_ = end;
  return reinterpret_cast<void*>(base_ + start);
}

StatusOr<size_t> ReleasableArena::Release() {
  if (released_) return size_t{0};
  ASTR_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "synchronizing before releasing " + what_);
  const Vmm& d = Driver();
  for (Chunk& c : chunks_) {
    if (CUresult r = d.unmap(static_cast<CUdeviceptr>(base_ + c.offset), c.bytes);
        r != CUDA_SUCCESS) {
      return DriverStatus(r, "unmapping " + what_);
    }
    d.release(static_cast<CUmemGenericAllocationHandle>(c.handle));
    c.handle = 0;
  }
  released_ = true;
  return mapped_;
}

StatusOr<size_t> ReleasableArena::Restore() {
  if (!released_) return size_t{0};
  for (size_t i = 0; i < chunks_.size(); ++i) {
    if (Status s = MapChunk(&chunks_[i]); !s.ok()) {
      // All or nothing: what was mapped goes back, the arena stays released.
      const Vmm& d = Driver();
      for (size_t k = 0; k < i; ++k) {
        d.unmap(static_cast<CUdeviceptr>(base_ + chunks_[k].offset), chunks_[k].bytes);
        d.release(static_cast<CUmemGenericAllocationHandle>(chunks_[k].handle));
        chunks_[k].handle = 0;
      }
      return s;
    }
  }
  released_ = false;
  return mapped_;
}

}  // namespace astr::cuda
