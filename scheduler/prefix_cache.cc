#include "scheduler/prefix_cache.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <queue>

namespace astr::sched {

namespace {

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 29);
}

uint64_t HashTokens(std::span<const int32_t> tokens) {
  uint64_t h = 0x84222325CBF29CE4ull;
  for (int32_t t : tokens) h = Mix(h, static_cast<uint32_t>(t));
  return h;
}

}  // namespace

struct PrefixCache::Node {
  Node* parent = nullptr;  // nullptr for a root
  uint64_t key = 0;        // HashTokens(tokens); a root's: its namespace
  std::vector<int32_t> tokens;
  int32_t page = -1;            // -1 for a root
  std::vector<int32_t> window;  // its page's window ids while the cache keeps them
  bool dead = false;            // erased during the current Reclaim (in graveyard_)
  uint64_t ready_step = 0;
  uint64_t last_used = 0;
  std::unordered_map<uint64_t, std::unique_ptr<Node>> children;
};

PrefixCache::PrefixCache(PagePool* pool) : pool_(pool), page_size_(pool->page_size()) {
  pool_->set_reclaimer(this);
}

PrefixCache::~PrefixCache() {
  Flush();
  pool_->set_reclaimer(nullptr);
}

uint64_t PrefixCache::Namespace(int64_t weight_version, std::string_view cache_salt,
                                uint64_t variant) {
  uint64_t h = Mix(0x5851F42D4C957F2Dull, static_cast<uint64_t>(weight_version));
  h = Mix(h, cache_salt.size());
  for (unsigned char c : cache_salt) h = Mix(h, c);
  return variant == 0 ? h : Mix(h, variant);
}

PrefixCache::Node* PrefixCache::Root(uint64_t ns) {
  std::unique_ptr<Node>& root = roots_[ns];
  if (root == nullptr) {
    root = std::make_unique<Node>();
    root->key = ns;
  }
  return root.get();
}

PrefixCache::Node* PrefixCache::Child(Node* parent, std::span<const int32_t> key) const {
  auto it = parent->children.find(HashTokens(key));
  if (it == parent->children.end()) return nullptr;
  Node* child = it->second.get();
  if (!std::equal(key.begin(), key.end(), child->tokens.begin(), child->tokens.end())) {
    return nullptr;  // a hash collision: another block of tokens
  }
  return child;
}

PrefixCache::MatchResult PrefixCache::Match(uint64_t ns, std::span<const int32_t> tokens,
                                            int64_t max_pages, uint64_t step, bool touch,
                                            std::vector<int32_t>* pages,
                                            std::vector<int32_t>* window) {
  MatchResult result;
  auto root = roots_.find(ns);
  if (root == roots_.end()) return result;
  Node* node = root->second.get();
  const int64_t limit = std::min<int64_t>(max_pages, static_cast<int64_t>(tokens.size()) /
                                                         page_size_);
  path_.clear();
  for (int64_t k = 0; k < limit; ++k) {
    Node* child = Child(node, tokens.subspan(k * page_size_, page_size_));
    if (child == nullptr) break;
    if (child->ready_step > step) {
      result.pending_next = true;
      break;
    }
    path_.push_back(child);
    node = child;
  }
  int64_t found = static_cast<int64_t>(path_.size());
  if (pool_->window().tables > 0 && found > 0) {
    // Cut back to the deepest end whose restart finds the window ids it reads: last_missing[k]
    // is the last page before k without them.
    last_missing_.assign(found + 1, -1);
    for (int64_t k = 0; k < found; ++k) {
      last_missing_[k + 1] = path_[k]->window.empty() ? k : last_missing_[k];
    }
    int64_t k = found;
    while (k > 0 && last_missing_[k] >= pool_->FirstWindowPage(k * page_size_)) --k;
    if (k < found) result.pending_next = false;
    found = k;
    result.window_first = pool_->FirstWindowPage(found * page_size_);
  }
  const uint64_t now = touch ? ++clock_ : 0;
  for (int64_t k = 0; k < found; ++k) {
    Node* n = path_[k];
    if (touch) n->last_used = now;
    pages->push_back(n->page);
    if (window != nullptr && k >= result.window_first) {
      window->insert(window->end(), n->window.begin(), n->window.end());
    }
  }
  result.pages = found;
  return result;
}

int64_t PrefixCache::Insert(uint64_t ns, std::span<const int32_t> tokens,
                            std::span<const int32_t> pages, std::span<const int32_t> window,
                            int64_t window_first, uint64_t ready_step, Cursor* cursor) {
  const int64_t tables = pool_->window().tables;
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(pages.size()),
                                      static_cast<int64_t>(tokens.size()) / page_size_);
  if (cursor->epoch != epoch_) *cursor = Cursor{.epoch = epoch_};  // flushed: walk from the root
  if (cursor->blocked || cursor->pages >= n) return 0;
  Node* node = cursor->node;
  int64_t k = cursor->pages;
  if (node == nullptr) {
    node = Root(ns);
    k = 0;
  }
  const uint64_t now = ++clock_;
  int64_t added = 0;
  for (; k < n; ++k) {
    const std::span<const int32_t> key = tokens.subspan(k * page_size_, page_size_);
    const uint64_t hash = HashTokens(key);
    auto it = node->children.find(hash);
    if (it != node->children.end()) {
      Node* child = it->second.get();
      if (child->page != pages[k] ||
          !std::equal(key.begin(), key.end(), child->tokens.begin(), child->tokens.end())) {
        cursor->blocked = true;  // a duplicate page (or a hash collision) sits there
        break;
      }
      child->last_used = now;
      node = child;
      continue;
    }
    if (pool_->cached(pages[k])) {  // cannot happen along a sequence's own path; stay safe
      cursor->blocked = true;
      break;
    }
    auto child = std::make_unique<Node>();
    child->parent = node;
    child->key = hash;
    child->tokens.assign(key.begin(), key.end());
    child->page = pages[k];
    child->ready_step = ready_step;
    child->last_used = now;
    pool_->AddCacheRef(pages[k]);
    const int64_t w = (k - window_first) * tables;
    if (tables > 0 && k >= window_first && w + tables <= static_cast<int64_t>(window.size())) {
      const std::span<const int32_t> ids = window.subspan(w, tables);
      if (std::none_of(ids.begin(), ids.end(), [this](int32_t id) { return pool_->cached(id); })) {
        for (int32_t id : ids) pool_->AddCacheRef(id);
        child->window.assign(ids.begin(), ids.end());
        num_window_ids_ += tables;
      }
    }
    Node* raw = child.get();
    node->children.emplace(hash, std::move(child));
    node = raw;
    ++num_nodes_;
    ++added;
  }
  cursor->node = k > 0 ? node : nullptr;  // a root may go away with its last child
  cursor->pages = k;
  return added;
}

int64_t PrefixCache::DropWindow(Node* node) {
  int64_t freed = 0;
  for (int32_t id : node->window) {
    if (pool_->refcount(id) == 1) ++freed;
    pool_->DropCacheRef(id);
  }
  num_window_ids_ -= static_cast<int64_t>(node->window.size());
  node->window.clear();
  return freed;
}

int64_t PrefixCache::Erase(Node* leaf) {
  assert(leaf->children.empty() && leaf->parent != nullptr);
  Node* parent = leaf->parent;
  int64_t freed = DropWindow(leaf);
  if (pool_->refcount(leaf->page) == 1) ++freed;
  pool_->DropCacheRef(leaf->page);
  --num_nodes_;
  auto it = parent->children.find(leaf->key);
  leaf->dead = true;
  graveyard_.push_back(std::move(it->second));
  parent->children.erase(it);
  if (parent->parent == nullptr && parent->children.empty()) roots_.erase(parent->key);
  return freed;
}

int64_t PrefixCache::Flush() {
  int64_t freed = 0;
  scratch_.clear();
  for (auto& [ns, root] : roots_) scratch_.push_back(root.get());
  while (!scratch_.empty()) {
    Node* node = scratch_.back();
    scratch_.pop_back();
    for (auto& [key, child] : node->children) scratch_.push_back(child.get());
    if (node->page >= 0) {
      if (pool_->refcount(node->page) == 1) ++freed;
      pool_->DropCacheRef(node->page);
    }
    freed += DropWindow(node);
  }
  roots_.clear();
  num_nodes_ = 0;
  ++epoch_;
  return freed;
}

int64_t PrefixCache::Reclaim(int64_t pages) {
  if (pages <= 0) return 0;
  auto leaf_evictable = [this](const Node* n) {
    return n->parent != nullptr && n->children.empty() && pool_->refcount(n->page) == 1;
  };
  auto window_evictable = [this](const Node* n) {
    return !n->window.empty() &&
           std::all_of(n->window.begin(), n->window.end(),
                       [this](int32_t id) { return pool_->refcount(id) == 1; });
  };
  // Evictable leaves (a whole node) and window ids only the cache holds (the node stays), least
  // recently used first. An entry may go stale (erased, or its window already dropped): skipped.
  struct Item {
    uint64_t last_used;
    Node* node;
    bool leaf;
  };
  auto later = [](const Item& a, const Item& b) { return a.last_used > b.last_used; };
  std::priority_queue<Item, std::vector<Item>, decltype(later)> queue(later);
  scratch_.clear();
  for (auto& [ns, root] : roots_) scratch_.push_back(root.get());
  while (!scratch_.empty()) {
    Node* node = scratch_.back();
    scratch_.pop_back();
    if (leaf_evictable(node)) {
      queue.push({node->last_used, node, true});
    } else if (window_evictable(node)) {
      queue.push({node->last_used, node, false});
    }
    for (auto& [key, child] : node->children) scratch_.push_back(child.get());
  }
  int64_t freed = 0;
  while (freed < pages && !queue.empty()) {
    const Item item = queue.top();
    queue.pop();
    Node* node = item.node;
    if (node->dead) continue;
    if (!item.leaf) {
      if (window_evictable(node)) freed += DropWindow(node);
      continue;
    }
    Node* parent = node->parent;
    const bool parent_is_root = parent->parent == nullptr;
    freed += Erase(node);  // may erase an emptied root: parent is not used after that
    if (!parent_is_root && leaf_evictable(parent)) queue.push({parent->last_used, parent, true});
  }
  graveyard_.clear();
  return freed;
}

}  // namespace astr::sched
