// The scheduler's view of one worker's paged KV pool: which page ids are free and which sequences
// hold the others. The worker never allocates pages; it receives the ids this class hands out (see
// DESIGN.md "The step contract").
//
// Every page carries a reference count, so that one page can sit in several sequences: the prefix
// cache (prefix_cache.h) shares a prompt's full pages between requests and holds one reference of
// its own on each page it keeps. A cached page that nobody else holds is *evictable*: it counts as
// free (num_free), and Take evicts such pages, least recently used first, when the truly unused
// ones run out. So the cache never makes a sequence wait or be preempted where an empty cache
// would not.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/base/page_list.h"

namespace astr::sched {

// What the pool asks of a prefix cache (PrefixCache implements it).
class PageReclaimer {
 public:
  virtual ~PageReclaimer() = default;
  // Drops the cache's reference on up to `pages` evictable pages (they become unused); returns how
  // many it dropped.
  virtual int64_t Reclaim(int64_t pages) = 0;
};

// Sliding-window page groups (the worker's KvLayout): each token page of a sequence takes one page
// id in its page list and `tables` more in its window list while a query may still read it; the
// window list's leading pages go back once every later query's window has passed them.
struct KvWindow {
  int64_t tokens = 0;           // the sliding layers' window
  int32_t tables = 0;           // window page ids per token page; 0 = no window list
  int64_t max_step_tokens = 0;  // the most tokens one step feeds a sequence: the prefill chunk
};

class PagePool {
 public:
  PagePool(int64_t num_pages, int32_t page_size, KvWindow window = {});
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  int64_t num_pages() const { return num_pages_; }
  int32_t page_size() const { return page_size_; }
  // Pages a Take may hand out: unused ones plus evictable cached ones.
  int64_t num_free() const { return num_unused() + evictable_; }
  // Pages nobody holds, not even the cache.
  int64_t num_unused() const { return static_cast<int64_t>(free_.size()); }
  // Cached pages nobody but the cache holds.
  int64_t num_evictable() const { return evictable_; }
  // Tokens of the longest sequence the whole pool holds (with a window list: as it decodes, its
  // window pages passed give room to its later ones).
  int64_t capacity_tokens() const;
  // Pages needed to hold `tokens` positions.
  int64_t PagesFor(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }
  const KvWindow& window() const { return window_; }
  void set_max_step_tokens(int64_t tokens) { window_.max_step_tokens = tokens; }
  // Page ids `token_pages` more token pages of a sequence take (1 + window tables each).
  int64_t IdsFor(int64_t token_pages) const { return token_pages * (1 + window_.tables); }
  // The first token page a query at `position` reads through the window list (0 without one).
  int64_t FirstWindowPage(int64_t position) const {
    return window_.tables == 0 ? 0 : astr::FirstWindowPage(position, window_.tokens, page_size_);
  }
  // References on `page` (0 = free), the cache's included.
  int32_t refcount(int32_t page) const { return refcount_[page]; }
  bool cached(int32_t page) const { return cached_[page] != 0; }

  // An empty page list bound to this pool. Every list must be destroyed (or released) before the
  // pool. Destroying a list (or Release()) drops one reference on each of its pages; a page
  // whose count reaches zero is free again.
  PageList<PagePool> NewList() { return PageList<PagePool>(this); }

  // The prefix cache's side. `reclaimer` (nullptr = none) must outlive its registration.
  void set_reclaimer(PageReclaimer* reclaimer) { reclaimer_ = reclaimer; }
  // The cache takes its own reference on a held page (refcount >= 1).
  void AddCacheRef(int32_t page);
  // The cache drops its reference; the page is unused once nobody else holds it.
  void DropCacheRef(int32_t page);

 private:
  friend class PageList<PagePool>;
  bool Take(int64_t count, std::vector<int32_t>* out);
  void AddRef(int32_t page);
  void Unref(std::span<const int32_t> pages);

  int64_t num_pages_;
  int32_t page_size_;
  KvWindow window_;
  std::vector<int32_t> refcount_;  // [num_pages]
  std::vector<uint8_t> cached_;    // [num_pages]: the cache holds a reference
  int64_t evictable_ = 0;          // cached pages whose only reference is the cache's
  PageReclaimer* reclaimer_ = nullptr;
  // Free page ids, used as a stack with the lowest id on top, so a fresh pool hands out 0, 1, 2 ...
  // (predictable plans in tests) and recently freed pages are reused first.
  std::vector<int32_t> free_;
};

}  // namespace astr::sched
