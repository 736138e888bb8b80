// Page ids of a KV pool handed out to sequences (the in-process counterpart of the scheduler's
// page pool, used by the offline engine). Its PageLists are RAII: destroying one returns its
// pages.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/base/page_list.h"

namespace astr {

class PageAllocator {
 public:
  explicit PageAllocator(int64_t num_pages);
  int64_t num_pages() const { return num_pages_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  // An empty page list bound to this allocator, which must outlive it.
  PageList<PageAllocator> NewList() { return PageList<PageAllocator>(this); }

 private:
  friend class PageList<PageAllocator>;
  bool Take(int64_t count, std::vector<int32_t>* out);
  // Pages are never shared here: every held page has exactly one holder, so dropping its
  // reference frees it.
  void Unref(std::span<const int32_t> pages);

  int64_t num_pages_;
  std::vector<int32_t> free_;  // stack; lowest ids on top so allocation order is predictable
};

}  // namespace astr
