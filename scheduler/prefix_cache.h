// The radix prefix cache of one worker's page pool: a tree over full KV pages, keyed by the
// tokens each page holds, so that a request whose prompt starts like an earlier one's reuses that
// earlier request's K/V instead of computing it again (DESIGN.md "The step contract": the
// scheduler keeps the cache, the worker receives shared page ids and `num_cached_tokens`).
//
// Shape. One node per page: a node's page holds positions [depth * page_size, + page_size) of
// every token sequence whose path runs through it, and its key is those page_size tokens. So two
// prompts that diverge inside a page share the pages before it and branch there (a page-granular
// radix tree: a divergence is a new child, never a split of a node). Only full pages are cached:
// a sequence always computes into pages of its own, and a cached page is never written again.
//
// Namespaces. Each tree hangs off a root chosen by a 64-bit namespace (the weight version and the
// request's cache_salt, mixed by Namespace()): KV of other weights, or of another tenant, is never
// found.
//
// References. The cache holds one page reference (PagePool::AddCacheRef) per node. A sequence
// that reuses a path takes its own reference on each page (PageList::AppendShared). A node whose
// page only the cache holds is evictable; the pool evicts through Reclaim, least recently used
// leaves first, only when it runs out of unused pages. Invariant that makes every evictable page
// reclaimable: a sequence inserts only along its own pages from the root, so every node a
// sequence holds has its ancestors held by that same sequence; a node with a held descendant is
// therefore held itself.
//
// Window pages (PagePool::window, sliding-window layers in page groups of their own): a node also
// holds its page's window ids while some holder keeps them (empty once dropped). A match may end
// after k pages only where the pages a query at position k * page_size reads through the window
// (from PagePool::FirstWindowPage) still have theirs, so it is cut back to the deepest such k. The
// cache holds a reference on each window id it keeps; one only the cache holds is evictable on
// its own (the node stays, holding its page), in the same least-recently-used order as leaves.
//
// Readiness. A page is inserted when the plan that computes it is built, so that a request
// arriving in that same plan can wait one step for it instead of computing it twice; such a node
// is *pending* until the next step (the worker runs plans in order, so the next plan may read it).
//
// Owned by the loop thread, like the pool.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "scheduler/page_pool.h"

namespace astr::sched {

class PrefixCache final : public PageReclaimer {
  struct Node;

 public:
  // Registers itself as `pool`'s reclaimer; `pool` must outlive it.
  explicit PrefixCache(PagePool* pool);
  ~PrefixCache() override;
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The namespace of KV computed under `weight_version` for requests with `cache_salt`, and
  // `variant` (another way of computing it: LongRoPE's long factors).
  static uint64_t Namespace(int64_t weight_version, std::string_view cache_salt,
                            uint64_t variant = 0);

  // Where a sequence's pages stand in the tree (Sequence keeps one). `node` is the deepest node of
  // its own path, valid while `epoch` equals the cache's (a flush changes it).
  struct Cursor {
    Node* node = nullptr;
    uint64_t epoch = 0;
    int64_t pages = 0;     // leading pages of the sequence that are on its path in the tree
    bool blocked = false;  // the tree holds another page where the sequence's next one would go
  };

  struct MatchResult {
    int64_t pages = 0;          // full pages found (ready ones only)
    bool pending_next = false;  // the page after them is being computed by the current step
    int64_t window_first = 0;   // window ids appended are those of pages [window_first, pages)
  };
  // The longest run of ready pages whose tokens prefix `tokens`, at most `max_pages` (and cut back
  // to where the window ids a restart reads are held), appended to *pages, and their window ids
  // from page window_first on to *window (page-major; may be null without a window), neither
  // referenced: the caller takes its references. With `touch`, the path becomes the most
  // recently used. `step` is the step being planned: nodes inserted by it are pending.
  MatchResult Match(uint64_t ns, std::span<const int32_t> tokens, int64_t max_pages, uint64_t step,
                    bool touch, std::vector<int32_t>* pages,
                    std::vector<int32_t>* window = nullptr);

  // Inserts the sequence's full pages [cursor.pages, n) where n = min(pages.size(),
  // tokens.size() / page_size): `pages` are its page ids in order, `tokens` its known tokens whose
  // K/V those pages hold (or will hold once step `ready_step - 1` has run). A page the tree
  // already holds under the same tokens is the sequence's own when it matched it; another page
  // there blocks the rest (the sequence computed a duplicate; its later pages are not cached).
  // Returns the pages added.
  // With a window, `window` holds the window ids of the sequence's pages [window_first, end)
  // (page-major, window().tables per page); a node added for an earlier page holds none.
  int64_t Insert(uint64_t ns, std::span<const int32_t> tokens, std::span<const int32_t> pages,
                 std::span<const int32_t> window, int64_t window_first, uint64_t ready_step,
                 Cursor* cursor);

  // Drops every node (pages held by sequences stay theirs). Returns the pages that became unused.
  int64_t Flush();
  int64_t Reclaim(int64_t pages) override;

  // Page ids the cache holds a reference on: one per node, plus the window ids it keeps.
  int64_t cached_pages() const { return num_nodes_ + num_window_ids_; }
  uint64_t epoch() const { return epoch_; }
  int32_t page_size() const { return page_size_; }

 private:
  Node* Root(uint64_t ns);
  Node* Child(Node* parent, std::span<const int32_t> key) const;
  // Removes a leaf node (its page's and window ids' references dropped); it is kept in graveyard_
  // until the end of Reclaim, marked dead. Returns the references dropped.
  int64_t Erase(Node* leaf);
  // Drops a node's window ids (their references); returns how many.
  int64_t DropWindow(Node* node);

  PagePool* pool_;
  int32_t page_size_;
  std::unordered_map<uint64_t, std::unique_ptr<Node>> roots_;
  int64_t num_nodes_ = 0;  // nodes with a page (roots have none)
  int64_t num_window_ids_ = 0;
  std::vector<std::unique_ptr<Node>> graveyard_;  // erased during one Reclaim
  uint64_t clock_ = 0;     // LRU: bumped on every touch
  uint64_t epoch_ = 1;     // bumped by Flush: every cursor is stale
  std::vector<Node*> scratch_;
  std::vector<Node*> path_;            // Match's scratch
  std::vector<int64_t> last_missing_;  // Match's scratch
};

}  // namespace astr::sched
