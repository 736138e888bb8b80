// The scheduler's view of one worker's paged KV pool: which page ids are free and which sequences
// hold the others. The worker never allocates pages; it receives the ids this class hands out (see
// DESIGN.md "The step contract").
//
// Every page carries a reference count so that one page can later sit in several sequences (a
// radix prefix cache over full pages shares a prompt's pages between requests). Nothing shares
// pages yet: today every count is 0 or 1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/base/page_list.h"

namespace astr::sched {

class PagePool {
 public:
  PagePool(int64_t num_pages, int32_t page_size);
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  int64_t num_pages() const { return num_pages_; }
  int32_t page_size() const { return page_size_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  // Tokens the whole pool holds.
  int64_t capacity_tokens() const { return num_pages_ * page_size_; }
  // Pages needed to hold `tokens` positions.
  int64_t PagesFor(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }
  // References on `page` (0 = free).
  int32_t refcount(int32_t page) const { return refcount_[page]; }

  // An empty page list bound to this pool. Every list must be destroyed (or released) before the
  // pool. Destroying a list (or Release()) drops one reference on each of its pages; a page
  // whose count reaches zero is free again.
  PageList<PagePool> NewList() { return PageList<PagePool>(this); }

 private:
  friend class PageList<PagePool>;
  bool Take(int64_t count, std::vector<int32_t>* out);
  void AddRef(int32_t page);
  void Unref(std::span<const int32_t> pages);

  int64_t num_pages_;
  int32_t page_size_;
  std::vector<int32_t> refcount_;  // [num_pages]
  // Free page ids, used as a stack with the lowest id on top, so a fresh pool hands out 0, 1, 2 ...
  // (predictable plans in tests) and recently freed pages are reused first.
  std::vector<int32_t> free_;
};

}  // namespace astr::sched
