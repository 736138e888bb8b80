// Page ids of a KV pool handed out to sequences (the in-process counterpart of the scheduler's
// block manager, used by the offline engine). A PageList is RAII: destroying it returns its pages.
#pragma once

#include <cstdint>
#include <vector>

namespace astr {

class PageAllocator;

// The pages of one sequence, in sequence order.
class PageList {
 public:
  PageList() = default;
  explicit PageList(PageAllocator* owner) : owner_(owner) {}
  PageList(const PageList&) = delete;
  PageList& operator=(const PageList&) = delete;
  PageList(PageList&& other) noexcept { *this = std::move(other); }
  PageList& operator=(PageList&& other) noexcept;
  ~PageList() { Release(); }

  const std::vector<int32_t>& pages() const { return pages_; }
  int64_t size() const { return static_cast<int64_t>(pages_.size()); }
  // Grows to `count` pages; false (and unchanged) if the pool has too few free pages.
  bool GrowTo(int64_t count);
  // Returns every page to the allocator.
  void Release();

 private:
  PageAllocator* owner_ = nullptr;
  std::vector<int32_t> pages_;
};

class PageAllocator {
 public:
  explicit PageAllocator(int64_t num_pages);
  int64_t num_pages() const { return num_pages_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  PageList NewList() { return PageList(this); }

 private:
  friend class PageList;
  bool Take(int64_t count, std::vector<int32_t>* out);
  void Give(const std::vector<int32_t>& pages);

  int64_t num_pages_;
  std::vector<int32_t> free_;  // stack; lowest ids on top so allocation order is predictable
};

}  // namespace astr
