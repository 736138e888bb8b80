#include "scheduler/page_pool.h"

#include <algorithm>
#include <cassert>

namespace astr::sched {

PagePool::PagePool(int64_t num_pages, int32_t page_size, KvWindow window)
    : num_pages_(num_pages),
      page_size_(page_size),
      window_(window),
      refcount_(num_pages, 0),
      cached_(num_pages, 0) {
  free_.reserve(num_pages);
  for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

int64_t PagePool::capacity_tokens() const {
  if (window_.tables == 0) return num_pages_ * page_size_;
  // A sequence alone holds every token page plus the window pages of at most `most` token pages:
  // those a step's queries read, from the first one's window to the last one's page.
  const int64_t most =
      PagesFor(window_.tokens - 1 + std::max<int64_t>(1, window_.max_step_tokens)) + 1;
  const int64_t short_pages = num_pages_ / (1 + window_.tables);
  if (short_pages <= most) return short_pages * page_size_;
  return (num_pages_ - window_.tables * most) * page_size_;
}

bool PagePool::Take(int64_t count, std::vector<int32_t>* out) {
  if (count > num_free()) return false;
  if (count > num_unused() && reclaimer_ != nullptr) reclaimer_->Reclaim(count - num_unused());
  if (count > num_unused()) return false;  // only when the reclaimer broke its count
  for (int64_t i = 0; i < count; ++i) {
    const int32_t page = free_.back();
    free_.pop_back();
    refcount_[page] = 1;
    out->push_back(page);
  }
  return true;
}

void PagePool::AddRef(int32_t page) {
  // Only a held page can be shared; a free page is handed out by Take.
  assert(page >= 0 && page < num_pages_ && refcount_[page] > 0);
  if (cached_[page] && refcount_[page] == 1) --evictable_;
  ++refcount_[page];
}

void PagePool::Unref(std::span<const int32_t> pages) {
  // Reverse order so that a sequence's first page ends on top of the stack: releasing and
  // regrowing one sequence gives it the same ids back.
  for (auto it = pages.rbegin(); it != pages.rend(); ++it) {
    assert(refcount_[*it] > 0);
    const int32_t left = --refcount_[*it];
    if (left == 0) {
      free_.push_back(*it);
    } else if (left == 1 && cached_[*it]) {
      ++evictable_;
    }
  }
}

void PagePool::AddCacheRef(int32_t page) {
  assert(page >= 0 && page < num_pages_ && refcount_[page] > 0 && !cached_[page]);
  cached_[page] = 1;
  ++refcount_[page];
}

void PagePool::DropCacheRef(int32_t page) {
  assert(cached_[page] && refcount_[page] > 0);
  if (refcount_[page] == 1) --evictable_;
  cached_[page] = 0;
  if (--refcount_[page] == 0) free_.push_back(page);
}

}  // namespace astr::sched
