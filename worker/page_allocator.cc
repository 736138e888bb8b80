#include "worker/page_allocator.h"

namespace astr {

PageAllocator::PageAllocator(int64_t num_pages) : num_pages_(num_pages) {
  free_.reserve(num_pages);
  for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

bool PageAllocator::Take(int64_t count, std::vector<int32_t>* out) {
  if (count > num_free()) return false;
  for (int64_t i = 0; i < count; ++i) {
    out->push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void PageAllocator::Unref(std::span<const int32_t> pages) {
  for (auto it = pages.rbegin(); it != pages.rend(); ++it) free_.push_back(*it);
}

}  // namespace astr
