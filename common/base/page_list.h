// PageList: the KV pages one sequence holds, in sequence order, handed out by a page pool and
// returned to it on destruction (RAII). The pool keeps its own bookkeeping (free stack, reference
// counts); the list only remembers which ids it holds. The scheduler's PagePool hands them out (for
// astr-scheduler and for the offline engine, which drives the same planner in process).
//
// A Pool provides, to PageList<Pool> (usually as a friend):
//   bool Take(int64_t count, std::vector<int32_t>* out);
//       Appends `count` fresh pages (one reference each) to *out; false, *out unchanged, when the
//       pool has fewer than `count` free.
//   void Unref(std::span<const int32_t> pages);
//       Drops one reference on each page; a page nobody holds any more is free again.
//   void AddRef(int32_t page);
//       Only for AppendShared: one more reference on a page some list already holds.
#pragma once

#include <cassert>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace astr {

// The first page (of `page_size` tokens) that a query at `position` reads in layers whose sliding
// window is `window` tokens (positions [position - window + 1, position]); 0 without a window.
// Pages before it can go back to the pool (sliding-window page groups: worker/kv_pool.h KvLayout).
inline int64_t FirstWindowPage(int64_t position, int64_t window, int64_t page_size) {
  if (window <= 0) return 0;
  const int64_t from = position - window + 1;
  return from > 0 ? from / page_size : 0;
}

template <typename Pool>
class PageList {
 public:
  PageList() = default;
  // An empty list bound to `pool`, which must outlive it.
  explicit PageList(Pool* pool) : pool_(pool) {}
  PageList(const PageList&) = delete;
  PageList& operator=(const PageList&) = delete;
  PageList(PageList&& other) noexcept { *this = std::move(other); }
  // Returns this list's pages first, then takes over other's pages and pool (other is left
  // empty, still bound to its pool).
  PageList& operator=(PageList&& other) noexcept {
    if (this != &other) {
      Release();
      pool_ = other.pool_;
      pages_ = std::move(other.pages_);
      other.pages_.clear();
    }
    return *this;
  }
  ~PageList() { Release(); }

  const std::vector<int32_t>& pages() const { return pages_; }
  int64_t size() const { return static_cast<int64_t>(pages_.size()); }
  // The pool it draws from (nullptr when default-constructed).
  const Pool* pool() const { return pool_; }

  // Grows to `count` pages with fresh (unshared) pages; false and unchanged when the pool has too
  // few free pages. Must be bound to a pool.
  bool GrowTo(int64_t count) {
    if (count <= size()) return true;
    assert(pool_ != nullptr);
    return pool_->Take(count - size(), &pages_);
  }
  // Appends a page another list already holds, taking one more reference on it (the prefix
  // cache's way of sharing a full page).
  void AppendShared(int32_t page) {
    assert(pool_ != nullptr);
    pool_->AddRef(page);
    pages_.push_back(page);
  }
  // Drops the first `count` pages (a sliding window passing them), in order.
  void DropFront(int64_t count) {
    if (count <= 0) return;
    assert(pool_ != nullptr && count <= size());
    pool_->Unref(std::span<const int32_t>(pages_.data(), static_cast<size_t>(count)));
    pages_.erase(pages_.begin(), pages_.begin() + count);
  }
  // Drops every page. The list stays bound to its pool and may grow again.
  void Release() {
    if (pool_ != nullptr && !pages_.empty()) pool_->Unref(std::span<const int32_t>(pages_));
    pages_.clear();  // keeps the capacity: a preempted sequence regrows without allocating
  }

 private:
  Pool* pool_ = nullptr;
  std::vector<int32_t> pages_;
};

}  // namespace astr
