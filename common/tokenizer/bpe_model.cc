// Byte-pair encoding as the `tokenizers` library does it: the word starts as one symbol per
// character (unknown characters fall back to <0xXX> byte tokens or unk), then the adjacent pair
// with the lowest merge rank is merged until no pair has a rank; ties go to the leftmost pair.
#include <array>
#include <cstdio>
#include <limits>
#include <mutex>
#include <queue>

#include "common/tokenizer/model.h"
#include "common/unicode.h"

namespace astr::tok {
namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();
// Words longer than this use a heap instead of a linear scan for the next merge.
constexpr size_t kLinearScanLimit = 64;

// Results for recently seen words, shared by all threads: most words of real text repeat, and a
// lookup is far cheaper than the merge loop. Sharded so that threads rarely wait on one another;
// a full shard stops taking new words (like tokenizers' cache) rather than evicting.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 64;
  static constexpr size_t kEntriesPerShard = 4096;

  bool Lookup(std::string_view word, std::vector<int32_t>& out) const {
    const size_t h = std::hash<std::string_view>{}(word);
    Shard& shard = shards_[h % kShards];
    std::lock_guard<std::mutex> lock(shard.mu);
    const auto it = shard.map.find(word);
    if (it == shard.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void Insert(std::string_view word, const int32_t* ids, size_t n) const {
    const size_t h = std::hash<std::string_view>{}(word);
    Shard& shard = shards_[h % kShards];
    std::lock_guard<std::mutex> lock(shard.mu);
    if (shard.map.size() >= kEntriesPerShard) return;
    shard.map.emplace(std::string(word), std::vector<int32_t>(ids, ids + n));
  }

 private:
  static constexpr size_t kShards = 16;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kShards> shards_;
};

struct MergeTarget {
  int32_t rank;
  int32_t id;
};

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Open-addressing hash table from a token pair to its merge: the merge loop's hot lookup, about 3x
// faster than std::unordered_map (one probe into a flat array, no node chasing).
class MergeTable {
 public:
  explicit MergeTable(const std::unordered_map<uint64_t, MergeTarget>& merges) {
    size_t capacity = 16;
    while (capacity < merges.size() * 2) capacity *= 2;
    mask_ = capacity - 1;
    slots_.assign(capacity, Slot{kEmpty, {0, 0}});
    for (const auto& [key, target] : merges) {
      size_t i = Hash(key) & mask_;
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = Slot{key, target};
    }
  }
  const MergeTarget* Find(uint64_t key) const {
    for (size_t i = Hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.target;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  // Both ids are non-negative, so a key never has all bits set.
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key;
    MergeTarget target;
  };
  static size_t Hash(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<size_t>(key);
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

class BpeModel final : public Model {
 public:
  BpeModel(TokenMap vocab, std::vector<std::string> id_to_token,
           const std::unordered_map<uint64_t, MergeTarget>& merges, BpeOptions options)
      : vocab_(std::move(vocab)),
        id_to_token_(std::move(id_to_token)),
        merges_(merges),
        options_(std::move(options)) {
    if (!options_.unk_token.empty()) unk_id_ = Find(options_.unk_token);
    for (int b = 0; b < 256; ++b) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
      byte_ids_[b] = Find(hex);
    }
  }

  void Tokenize(std::string_view word, std::vector<int32_t>& out) const override {
    if (options_.ignore_merges) {
      if (const int32_t id = Find(word); id >= 0) {
        out.push_back(id);
        return;
      }
    }
    const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
    if (cacheable && cache_.Lookup(word, out)) return;
    std::vector<int32_t> symbols;
    InitialSymbols(word, symbols);
    if (symbols.size() > kLinearScanLimit) {
      MergeWithHeap(symbols);
    } else {
      MergeLinear(symbols);
    }
    if (cacheable) cache_.Insert(word, symbols.data(), symbols.size());
    out.insert(out.end(), symbols.begin(), symbols.end());
  }

  const std::vector<std::string>& id_to_token() const override { return id_to_token_; }
  const TokenMap& token_to_id() const override { return vocab_; }

 private:
  int32_t Find(std::string_view token) const {
    const auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  }

  const MergeTarget* FindMerge(int32_t a, int32_t b) const { return merges_.Find(PairKey(a, b)); }

  // One symbol per character; see tokenizers' BPE::merge_word.
  void InitialSymbols(std::string_view word, std::vector<int32_t>& symbols) const {
    int32_t pending_unk = -1;  // a (possibly fused) unk waiting to be emitted
    std::string decorated;
    for (size_t i = 0; i < word.size();) {
      const size_t begin = i;
      unicode::NextCodepoint(word, i);
      std::string_view ch = word.substr(begin, i - begin);
      const bool first = begin == 0;
      const bool last = i == word.size();
      if ((!first && !options_.continuing_subword_prefix.empty()) ||
          (last && !options_.end_of_word_suffix.empty())) {
        decorated.clear();
        if (!first) decorated += options_.continuing_subword_prefix;
        decorated += ch;
        if (last) decorated += options_.end_of_word_suffix;
        ch = decorated;
      }
      if (const int32_t id = Find(ch); id >= 0) {
        if (pending_unk >= 0) symbols.push_back(pending_unk);
        pending_unk = -1;
        symbols.push_back(id);
        continue;
      }
      if (options_.byte_fallback && AllBytesKnown(ch)) {
        // tokenizers does not flush a pending unk here: it stays pending until a known
        // character or the end of the word.
        for (char c : ch) symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
      if (unk_id_ < 0) continue;  // no unk token: the character is dropped
      if (pending_unk >= 0 && !options_.fuse_unk) symbols.push_back(pending_unk);
      pending_unk = unk_id_;
    }
    if (pending_unk >= 0) symbols.push_back(pending_unk);
  }

  bool AllBytesKnown(std::string_view ch) const {
    for (char c : ch) {
      if (byte_ids_[static_cast<uint8_t>(c)] < 0) return false;
    }
    return true;
  }

  void MergeLinear(std::vector<int32_t>& symbols) const {
    while (symbols.size() > 1) {
      int32_t best_rank = kNoRank;
      size_t best = 0;
      int32_t best_id = -1;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        const MergeTarget* m = FindMerge(symbols[i], symbols[i + 1]);
        if (m != nullptr && m->rank < best_rank) {
          best_rank = m->rank;
          best = i;
          best_id = m->id;
        }
      }
      if (best_id < 0) return;
      symbols[best] = best_id;
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
  }

  // Same order as MergeLinear (lowest rank, then leftmost), in O(n log n) for long words.
  void MergeWithHeap(std::vector<int32_t>& symbols) const {
    const int n = static_cast<int>(symbols.size());
    std::vector<int> prev(n), next(n);
    std::vector<uint8_t> alive(n, 1);
    for (int i = 0; i < n; ++i) {
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    struct Candidate {
      int32_t rank;
      int pos;
      int32_t left_id;
      int32_t right_id;
      int32_t merged_id;
      bool operator>(const Candidate& o) const {
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    // The initial pairs are heapified at once (O(n)) rather than pushed one by one.
    std::vector<Candidate> initial;
    initial.reserve(n);
    for (int i = 0; i + 1 < n; ++i) {
      if (const MergeTarget* m = FindMerge(symbols[i], symbols[i + 1])) {
        initial.push_back({m->rank, i, symbols[i], symbols[i + 1], m->id});
      }
    }
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap(std::greater<>(),
                                                                                std::move(initial));
    auto push = [&](int left) {
      if (left < 0 || next[left] < 0) return;
      const int right = next[left];
      if (const MergeTarget* m = FindMerge(symbols[left], symbols[right])) {
        heap.push({m->rank, left, symbols[left], symbols[right], m->id});
      }
    };
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      const int right = next[c.pos];
      // Stale: either side changed since the candidate was queued.
      if (!alive[c.pos] || right < 0 || symbols[c.pos] != c.left_id ||
          symbols[right] != c.right_id) {
        continue;
      }
      symbols[c.pos] = c.merged_id;
      alive[right] = 0;
      next[c.pos] = next[right];
      if (next[right] >= 0) prev[next[right]] = c.pos;
      push(prev[c.pos]);
      push(c.pos);
    }
    std::vector<int32_t> merged;
    for (int i = 0; i >= 0; i = next[i]) merged.push_back(symbols[i]);
    symbols = std::move(merged);
  }

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  MergeTable merges_;
  BpeOptions options_;
  int32_t unk_id_ = -1;
  int32_t byte_ids_[256];
  WordCache cache_;
};

}  // namespace

StatusOr<std::unique_ptr<Model>> MakeBpeModel(
    TokenMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
    const BpeOptions& options) {
  int32_t max_id = -1;
  const std::string* max_token = nullptr;
  for (const auto& [token, id] : vocab) {
    if (id < 0) return InvalidArgumentError("BPE vocab: token \"" + token + "\" has a negative id");
    if (id > max_id) {
      max_id = id;
      max_token = &token;
    }
  }
  // Ids index a dense table, so the largest id sizes it: a vocabulary may have holes (ids that only
  // added tokens fill), but not ~2^31 of them.
  constexpr int64_t kMaxIdHoles = int64_t{1} << 20;
  if (max_id >= static_cast<int64_t>(vocab.size()) + kMaxIdHoles) {
    return InvalidArgumentError("BPE vocab: token \"" + *max_token + "\" has id " +
                                std::to_string(max_id) + ", more than " +
                                std::to_string(kMaxIdHoles) + " past the " +
                                std::to_string(vocab.size()) + " tokens of the vocabulary");
  }
  std::vector<std::string> id_to_token(static_cast<size_t>(max_id + 1));
  for (const auto& [token, id] : vocab) id_to_token[id] = token;
  if (!options.unk_token.empty() && vocab.find(options.unk_token) == vocab.end()) {
    return InvalidArgumentError("BPE: unk_token \"" + options.unk_token + "\" is not in the vocab");
  }

  std::unordered_map<uint64_t, MergeTarget> merge_map;
  merge_map.reserve(merges.size());
  const size_t prefix = options.continuing_subword_prefix.size();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto ia = vocab.find(a);
    const auto ib = vocab.find(b);
    if (ia == vocab.end() || ib == vocab.end()) {
      return InvalidArgumentError("merges[" + std::to_string(rank) + "]" + " \"" + a + " " + b +
                                  "\" uses a token that is not in the vocab");
    }
    // With a continuing-subword prefix the right side's prefix is dropped when joining.
    std::string joined = a;
    joined += prefix > 0 && b.compare(0, prefix, options.continuing_subword_prefix) == 0
                  ? std::string_view(b).substr(prefix)
                  : std::string_view(b);
    const auto ij = vocab.find(joined);
    if (ij == vocab.end()) {
      return InvalidArgumentError("merges[" + std::to_string(rank) + "]" + " \"" + a + " " + b +
                                  "\" makes \"" + joined + "\", which is not in the vocab");
    }
    // A duplicated pair keeps its last rank, as in tokenizers (it collects into a HashMap).
    merge_map.insert_or_assign(PairKey(ia->second, ib->second),
                               MergeTarget{static_cast<int32_t>(rank), ij->second});
  }
  return std::unique_ptr<Model>(
      new BpeModel(std::move(vocab), std::move(id_to_token), merge_map, options));
}

}  // namespace astr::tok
