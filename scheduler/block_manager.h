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

namespace astr::sched {

class BlockManager;

// The pages of one sequence, in sequence order. RAII: destroying it (or Release()) drops one
// reference on each page; a page whose count reaches zero is free again.
class PageAllocation {
 public:
  PageAllocation() = default;
  PageAllocation(const PageAllocation&) = delete;
  PageAllocation& operator=(const PageAllocation&) = delete;
  PageAllocation(PageAllocation&& other) noexcept { *this = std::move(other); }
  PageAllocation& operator=(PageAllocation&& other) noexcept;
  ~PageAllocation() { Release(); }

  const std::vector<int32_t>& pages() const { return pages_; }
  int64_t size() const { return static_cast<int64_t>(pages_.size()); }
  // The pool it draws from (nullptr when default-constructed).
  const BlockManager* manager() const { return owner_; }

  // Grows to `count` pages with fresh (unshared) pages; false and unchanged when the pool has too
  // few free pages. Must be bound (BlockManager::NewAllocation).
  bool GrowTo(int64_t count);
  // Appends a page another allocation already holds, taking one more reference on it (the prefix
  // cache's way of sharing a full page).
  void AppendShared(int32_t page);
  // Drops every page. The allocation stays bound to its manager and may grow again.
  void Release();

 private:
  friend class BlockManager;
  explicit PageAllocation(BlockManager* owner) : owner_(owner) {}

  BlockManager* owner_ = nullptr;
  std::vector<int32_t> pages_;
};

class BlockManager {
 public:
  BlockManager(int64_t num_pages, int32_t page_size);
  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;

  int64_t num_pages() const { return num_pages_; }
  int32_t page_size() const { return page_size_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  // Tokens the whole pool holds.
  int64_t capacity_tokens() const { return num_pages_ * page_size_; }
  // Pages needed to hold `tokens` positions.
  int64_t PagesFor(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }
  // References on `page` (0 = free).
  int32_t refcount(int32_t page) const { return refcount_[page]; }

  // An empty allocation bound to this pool. Every allocation must be destroyed (or released)
  // before the manager.
  PageAllocation NewAllocation() { return PageAllocation(this); }

 private:
  friend class PageAllocation;
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
