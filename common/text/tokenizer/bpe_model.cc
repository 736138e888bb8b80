// Byte-pair encoding as the `tokenizers` library does it: the word starts as one symbol per
// character (unknown characters fall back to <0xXX> byte tokens or unk), then the adjacent pair
// with the lowest merge rank is merged until no pair has a rank; ties go to the leftmost pair.
#include <algorithm>
#include <array>
#include <bitset>
#include <cstdio>
#include <iterator>
#include <limits>
#include <mutex>
#include <queue>

#include "common/text/tokenizer/model.h"
#include "common/text/unicode/unicode.h"

namespace astr::tok {
namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();
// Words longer than this use a heap instead of a linear scan for the next merge.
constexpr size_t kLinearScanLimit = 64;
// Code points with a precomputed "is a token" bit (those of 1- and 2-byte UTF-8).
constexpr uint32_t kSmallChars = 0x800;

size_t Utf8Size(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

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

// A set of byte pairs (65536 bits).
class BytePairSet {
 public:
  void Set(char a, char b) {
    const size_t i = Index(a, b);
    bits_[i / 64] |= uint64_t{1} << (i % 64);
  }
  bool Has(char a, char b) const {
    const size_t i = Index(a, b);
    return (bits_[i / 64] >> (i % 64)) & 1;
  }

 private:
  static size_t Index(char a, char b) {
    return (size_t{static_cast<uint8_t>(a)} << 8) | static_cast<uint8_t>(b);
  }
  std::array<uint64_t, 1024> bits_{};
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
    all_byte_ids_ =
        std::all_of(std::begin(byte_ids_), std::end(byte_ids_), [](int32_t id) { return id >= 0; });
    // Decorated symbols (prefix / suffix) are not the text they cover: no cut points then.
    can_cut_ = options_.continuing_subword_prefix.empty() && options_.end_of_word_suffix.empty();
    for (const std::string& token : id_to_token_) {
      max_token_bytes_ = std::max(max_token_bytes_, token.size());
      for (size_t i = 1; i < token.size(); ++i) pairs_.Set(token[i - 1], token[i]);
    }
    std::string ch;
    for (uint32_t cp = 0; cp < kSmallChars; ++cp) {
      ch.clear();
      unicode::AppendUtf8(cp, ch);
      known_small_[cp] = Find(ch) >= 0;
    }
  }

  void Tokenize(std::string_view word, std::vector<int32_t>& out) const override {
    if (options_.ignore_merges) {
      if (const int32_t id = Find(word); id >= 0) {
        out.push_back(id);
        return;
      }
    }
    if (!can_cut_ || word.size() <= WordCache::kMaxWordBytes) {
      TokenizePiece(word, out);
      return;
    }
    // A long word (a whole segment when there is no pre-tokenizer, as for Llama's tokenizer.json)
    // is cut where no merge can reach across, and its pieces are tokenized one by one: same ids,
    // with the merge state of one piece in memory, and pieces that repeat hit the cache. A merge
    // joins two symbols into a token whose string is theirs concatenated, so a symbol spanning a
    // point between two known characters puts those characters' bytes next to each other in a
    // token; where no token has that byte pair, no merge ever spans the point, and the merges on
    // either side (lowest rank first, leftmost first) happen exactly as they would alone.
    // (ignore_merges applies to the whole word only: a piece is merged even if it is a token.)
    size_t begin = 0;
    size_t prev = 0;  // start of the character before `i`
    for (size_t i = 0; i < word.size();) {
      const size_t start = i;
      unicode::NextCodepoint(word, i);
      if (start > begin && !pairs_.Has(word[start - 1], word[start]) &&
          Find(word.substr(prev, start - prev)) >= 0 && Find(word.substr(start, i - start)) >= 0) {
        TokenizePiece(word.substr(begin, start - begin), out);
        begin = start;
      }
      prev = start;
    }
    TokenizePiece(word.substr(begin), out);
  }

  size_t MaxWordBytesPerToken(std::span<const std::string> alphabet) const override {
    // A token covers the characters of the symbols merged into it. A known character's symbol is
    // its own bytes (plus any prefix / suffix), a byte-fallback symbol is 6 bytes for one, so
    // such a token covers at most its own length. An unk symbol covers one character of up to 4
    // bytes, so a token with unks in it covers at most 4 bytes per byte of its own.
    const bool known_alphabet = !alphabet.empty() && can_cut_ &&
                                std::all_of(alphabet.begin(), alphabet.end(),
                                            [&](const std::string& ch) { return Find(ch) >= 0; });
    if (known_alphabet || (options_.byte_fallback && all_byte_ids_)) return max_token_bytes_;
    // Otherwise an unknown character is dropped (no unk) or joins a run that is one unk (fuse_unk).
    if (unk_id_ >= 0 && !options_.fuse_unk) return 4 * max_token_bytes_;
    return 0;
  }

  // Only the known characters count: each is a symbol of its own bytes, so the tokens covering
  // them are at least that long in all; an unknown one may be dropped or fused into one unk.
  // (SmolLM2's byte-level vocabulary has no token for six ASCII control bytes, so a word's length
  // alone bounds nothing.) Decorated symbols are not their characters: no bound then.
  size_t CountedCharBytesPerToken() const override { return can_cut_ ? max_token_bytes_ : 0; }
  bool CountsChar(std::string_view ch) const override { return Find(ch) >= 0; }
  size_t MinTokens(std::string_view word) const override {
    if (CountedCharBytesPerToken() == 0) return 0;
    size_t known = 0;
    for (size_t i = 0; i < word.size();) {
      const size_t start = i;
      const uint32_t cp = unicode::NextCodepoint(word, i);
      const bool is_known = cp < kSmallChars && i - start == Utf8Size(cp)
                                ? known_small_[cp]
                                : Find(word.substr(start, i - start)) >= 0;
      if (is_known) known += i - start;
    }
    return (known + max_token_bytes_ - 1) / max_token_bytes_;
  }

  const std::vector<std::string>& id_to_token() const override { return id_to_token_; }
  const TokenMap& token_to_id() const override { return vocab_; }

 private:
  int32_t Find(std::string_view token) const {
    const auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  }

  const MergeTarget* FindMerge(int32_t a, int32_t b) const { return merges_.Find(PairKey(a, b)); }

  // The merges of one word or piece, through the cache.
  void TokenizePiece(std::string_view word, std::vector<int32_t>& out) const {
    const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
    if (cacheable && cache_.Lookup(word, out)) return;
    std::vector<int32_t> symbols;
    symbols.reserve(word.size());  // at most one symbol per byte
    InitialSymbols(word, symbols);
    if (symbols.size() > kLinearScanLimit) {
      MergeWithHeap(symbols);
    } else {
      MergeLinear(symbols);
    }
    if (cacheable) cache_.Insert(word, symbols.data(), symbols.size());
    out.insert(out.end(), symbols.begin(), symbols.end());
  }

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

  // Same order as MergeLinear (lowest rank, then leftmost), in O(n log n) for long words. About
  // 20 bytes per symbol: the links, and 8-byte candidates that hold only (rank, position) because a
  // rank names one pair, so a candidate is current iff the pair now at its position has its rank.
  void MergeWithHeap(std::vector<int32_t>& symbols) const {
    const int32_t n = static_cast<int32_t>(symbols.size());
    std::vector<int32_t> prev(n), next(n);
    for (int32_t i = 0; i < n; ++i) {
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    struct Candidate {
      int32_t rank;
      int32_t pos;
      bool operator>(const Candidate& o) const {
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    // The initial pairs are heapified at once (O(n)) rather than pushed one by one.
    std::vector<Candidate> initial;
    initial.reserve(n);
    for (int32_t i = 0; i + 1 < n; ++i) {
      if (const MergeTarget* m = FindMerge(symbols[i], symbols[i + 1])) {
        initial.push_back({m->rank, i});
      }
    }
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap(std::greater<>(),
                                                                                std::move(initial));
    auto push = [&](int32_t left) {
      if (left < 0 || next[left] < 0) return;
      if (const MergeTarget* m = FindMerge(symbols[left], symbols[next[left]])) {
        heap.push({m->rank, left});
      }
    };
    constexpr int32_t kMerged = -1;  // symbols[i] once i has been merged into its left neighbour
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      if (symbols[c.pos] == kMerged) continue;
      const int32_t right = next[c.pos];
      if (right < 0) continue;
      // Stale unless the pair there is still the one queued (either side may have changed).
      const MergeTarget* m = FindMerge(symbols[c.pos], symbols[right]);
      if (m == nullptr || m->rank != c.rank) continue;
      symbols[c.pos] = m->id;
      symbols[right] = kMerged;
      next[c.pos] = next[right];
      if (next[right] >= 0) prev[next[right]] = c.pos;
      push(prev[c.pos]);
      push(c.pos);
    }
    int32_t kept = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) symbols[kept++] = symbols[i];
    symbols.resize(kept);
  }

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  MergeTable merges_;
  BpeOptions options_;
  int32_t unk_id_ = -1;
  int32_t byte_ids_[256];
  bool all_byte_ids_ = false;
  bool can_cut_ = false;
  size_t max_token_bytes_ = 0;
  BytePairSet pairs_;  // byte pairs adjacent in some token
  // Whether each code point below kSmallChars (ASCII, Latin, the ByteLevel alphabet) is a token.
  std::bitset<kSmallChars> known_small_;
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
