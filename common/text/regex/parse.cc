// Recursive-descent parser for the Oniguruma (Ruby syntax) subset described in
// common/text/regex/regex.h.
#include <optional>
#include <string>

#include "common/text/regex/internal.h"

namespace astr::regex::internal {
namespace {

constexpr int kMaxNesting = 500;    // group nesting; bounds the parser's recursion
constexpr int kMaxRepeat = 100000;  // Oniguruma's ONIG_MAX_REPEAT_NUM

struct Flags {
  bool ignore_case = false;
  bool extended = false;  // (?x): whitespace and #-comments are ignored
  bool dot_all = false;   // (?m) in Ruby syntax: '.' also matches \n
};

using NodePtr = std::unique_ptr<Node>;

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
uint32_t HexValue(char c) {
  if (c <= '9') return c - '0';
  return (c | 0x20) - 'a' + 10;
}
bool IsAlnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

class Parser {
 public:
  explicit Parser(std::string_view pattern) : p_(pattern) {}

  StatusOr<ParsedPattern> Run() {
    ASTR_ASSIGN_OR_RETURN(NodePtr root, ParseAlternation(Flags{}, 0));
    if (pos_ < p_.size()) return Error("unmatched close parenthesis", pos_);
    ParsedPattern out;
    out.root = std::move(root);
    out.sets = std::move(sets_);
    return out;
  }

 private:
  Status Error(std::string_view what, size_t offset) const {
    return InvalidArgumentError("regex: " + std::string(what) + " at offset " +
                                std::to_string(offset) + " in pattern \"" + std::string(p_) + "\"");
  }
  bool AtEnd() const { return pos_ >= p_.size(); }

  NodePtr MakeNode(Node::Kind kind, size_t offset) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->offset = offset;
    return node;
  }
  NodePtr SetNode(CharSet set, const Flags& flags, size_t offset) {
    if (flags.ignore_case) set = set.CaseClosure();
    auto node = MakeNode(Node::Kind::kSet, offset);
    node->set = static_cast<int>(sets_.size());
    sets_.push_back(std::move(set));
    return node;
  }

  void SkipExtended(const Flags& flags) {
    if (!flags.extended) return;
    while (!AtEnd()) {
      const char c = p_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && p_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // alternation := concat ('|' concat)*; stops before ')' or at the end.
  StatusOr<NodePtr> ParseAlternation(const Flags& flags, int depth) {
    if (depth > kMaxNesting) return Error("groups nested too deeply", pos_);
    auto alt = MakeNode(Node::Kind::kAlt, pos_);
    while (true) {
      ASTR_ASSIGN_OR_RETURN(NodePtr branch, ParseConcat(flags, depth));
      alt->children.push_back(std::move(branch));
      if (AtEnd() || p_[pos_] != '|') break;
      ++pos_;
    }
    if (alt->children.size() == 1) return std::move(alt->children[0]);
    return alt;
  }

  StatusOr<NodePtr> ParseConcat(const Flags& flags, int depth) {
    auto concat = MakeNode(Node::Kind::kConcat, pos_);
    while (true) {
      SkipExtended(flags);
      if (AtEnd() || p_[pos_] == '|' || p_[pos_] == ')') break;
      const size_t start = pos_;
      // (?imx-imx) without ':' applies to the rest of the enclosing group, alternatives included
      // (Oniguruma reads "a(?i)b|c" as "a(?i:b|c)").
      Flags inner = flags;
      bool bare_options = false;
      ASTR_RETURN_IF_ERROR(TryBareOptions(flags, &inner, &bare_options));
      if (bare_options) {
        ASTR_ASSIGN_OR_RETURN(NodePtr rest, ParseAlternation(inner, depth + 1));
        concat->children.push_back(std::move(rest));
        break;
      }
      ASTR_ASSIGN_OR_RETURN(NodePtr atom, ParseAtom(flags, depth));
      if (atom == nullptr) continue;  // a comment group
      ASTR_ASSIGN_OR_RETURN(atom, ParseQuantifiers(std::move(atom), flags, start, depth));
      concat->children.push_back(std::move(atom));
    }
    if (concat->children.size() == 1) return std::move(concat->children[0]);
    if (concat->children.empty()) concat->kind = Node::Kind::kEmpty;
    return concat;
  }

  // Reads "{n}", "{n,}", "{,m}" or "{n,m}" at pos_; returns false (pos_ unchanged) for anything
  // else, which Oniguruma then takes as a literal '{'.
  bool ReadInterval(int* min, int* max, bool* too_big) {
    size_t i = pos_ + 1;
    auto read_number = [&](int* value) {
      const size_t begin = i;
      int64_t v = 0;
      while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') {
        v = std::min<int64_t>(v * 10 + (p_[i] - '0'), int64_t{kMaxRepeat} + 1);
        ++i;
      }
      *value = static_cast<int>(v);
      if (v > kMaxRepeat) *too_big = true;
      return i > begin;
    };
    const bool has_min = read_number(min);
    if (i < p_.size() && p_[i] == '}') {
      if (!has_min) return false;
      *max = *min;
    } else if (i < p_.size() && p_[i] == ',') {
      ++i;
      const bool has_max = read_number(max);
      if (!has_min && !has_max) return false;
      if (!has_min) *min = 0;
      if (!has_max) *max = -1;
      if (i >= p_.size() || p_[i] != '}') return false;
    } else {
      return false;
    }
    pos_ = i + 1;
    return true;
  }

  // Stacked quantifiers ("a**") nest like groups and count against the same depth limit.
  StatusOr<NodePtr> ParseQuantifiers(NodePtr atom, const Flags& flags, size_t atom_offset,
                                     int depth) {
    for (int stacked = 0; !AtEnd(); ++stacked) {
      if (depth + stacked > kMaxNesting) return Error("quantifiers nested too deeply", pos_);
      SkipExtended(flags);
      if (AtEnd()) break;
      const size_t q = pos_;
      const char c = p_[pos_];
      int min = 0, max = -1;
      bool interval = false;
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        min = 1;
        ++pos_;
      } else if (c == '?') {
        max = 1;
        ++pos_;
      } else if (c == '{') {
        bool too_big = false;
        if (!ReadInterval(&min, &max, &too_big)) break;
        if (too_big) return Error("repeat count too large (limit 100000)", q);
        if (max >= 0 && min > max) return Error("repeat range {n,m} with n > m", q);
        interval = true;
      } else {
        break;
      }
      if (atom->kind == Node::Kind::kAssert || atom->kind == Node::Kind::kLook) {
        return Error("target of repeat operator is invalid", q);
      }
      RepeatMode mode = RepeatMode::kGreedy;
      if (!AtEnd() && p_[pos_] == '?') {
        // "{n}?" is "(?:{n})?" in Ruby syntax, not a lazy fixed count.
        if (!(interval && min == max)) {
          mode = RepeatMode::kLazy;
          ++pos_;
        }
      } else if (!AtEnd() && p_[pos_] == '+' && !interval) {
        mode = RepeatMode::kPossessive;  // Ruby: *+ ++ ?+ only; "{n,m}+" is a nested repeat
        ++pos_;
      }
      auto repeat = MakeNode(Node::Kind::kRepeat, atom_offset);
      repeat->min = min;
      repeat->max = max;
      repeat->mode = mode;
      repeat->children.push_back(std::move(atom));
      atom = std::move(repeat);
    }
    return atom;
  }

  // Parses "(?imx-imx)" at pos_ if present: sets *found and the new flags.
  Status TryBareOptions(const Flags& flags, Flags* inner, bool* found) {
    *found = false;
    if (p_.substr(pos_, 2) != "(?" || pos_ + 2 >= p_.size()) return OkStatus();
    const char k = p_[pos_ + 2];
    if (k != 'i' && k != 'm' && k != 'x' && k != '-') return OkStatus();
    size_t i = pos_ + 2;
    Flags f = flags;
    ASTR_RETURN_IF_ERROR(ReadOptionLetters(&i, &f));
    if (i < p_.size() && p_[i] == ')') {
      *inner = f;
      *found = true;
      pos_ = i + 1;
    }
    return OkStatus();
  }

  Status ReadOptionLetters(size_t* i, Flags* f) {
    bool on = true;
    for (; *i < p_.size(); ++*i) {
      const char c = p_[*i];
      if (c == '-') {
        on = false;
      } else if (c == 'i') {
        f->ignore_case = on;
      } else if (c == 'x') {
        f->extended = on;
      } else if (c == 'm') {
        f->dot_all = on;
      } else if (c == ')' || c == ':') {
        return OkStatus();
      } else {
        return Error("undefined group option", *i);
      }
    }
    return Error("end pattern in group", *i);
  }

  // An atom, or nullptr for a comment group "(?#...)".
  StatusOr<NodePtr> ParseAtom(const Flags& flags, int depth) {
    const size_t start = pos_;
    const char c = p_[pos_];
    switch (c) {
      case '(':
        return ParseGroup(flags, depth);
      case '[': {
        ++pos_;
        ASTR_ASSIGN_OR_RETURN(CharSet set, ParseClassBody(flags, depth));
        return SetNode(std::move(set), Flags{}, start);  // case closure already applied
      }
      case '.':
        ++pos_;
        return SetNode(flags.dot_all ? CharSet::Categories(0).Complement() : NotNewlineSet(),
                       Flags{}, start);
      case '^':
        ++pos_;
        return AssertNode(AssertKind::kLineBegin, start);
      case '$':
        ++pos_;
        return AssertNode(AssertKind::kLineEnd, start);
      case '\\':
        return ParseEscape(flags);
      case '*':
      case '+':
      case '?':
        return Error("target of repeat operator is not specified", start);
      case '{': {
        int min = 0, max = 0;
        bool too_big = false;
        if (ReadInterval(&min, &max, &too_big)) {
          return Error("target of repeat operator is not specified", start);
        }
        break;
      }
      default:
        break;
    }
    size_t i = pos_;
    const uint32_t cp = unicode::NextCodepoint(p_, i);
    if (cp == unicode::kReplacementChar && i == pos_ + 1 &&
        static_cast<unsigned char>(p_[pos_]) >= 0x80) {
      return Error("invalid UTF-8 in pattern", pos_);
    }
    pos_ = i;
    return SetNode(CharSet::Single(cp), flags, start);
  }

  NodePtr AssertNode(AssertKind kind, size_t offset) {
    auto node = MakeNode(Node::Kind::kAssert, offset);
    node->assert_kind = kind;
    return node;
  }

  StatusOr<NodePtr> ParseGroup(const Flags& flags, int depth) {
    const size_t start = pos_;
    ++pos_;  // '('
    Flags inner = flags;
    NodePtr wrapper;
    if (!AtEnd() && p_[pos_] == '?') {
      ++pos_;
      if (AtEnd()) return Error("end pattern in group", pos_);
      const char k = p_[pos_];
      if (k == '#') {
        while (!AtEnd() && p_[pos_] != ')') ++pos_;
        if (AtEnd()) return Error("end pattern in group", start);
        ++pos_;
        return NodePtr();
      }
      if (k == ':') {
        ++pos_;
      } else if (k == '>') {
        ++pos_;
        wrapper = MakeNode(Node::Kind::kAtomic, start);
      } else if (k == '=' || k == '!') {
        ++pos_;
        wrapper = MakeNode(Node::Kind::kLook, start);
        wrapper->negate = k == '!';
      } else if (k == '<' && pos_ + 1 < p_.size() && (p_[pos_ + 1] == '=' || p_[pos_ + 1] == '!')) {
        wrapper = MakeNode(Node::Kind::kLook, start);
        wrapper->behind = true;
        wrapper->negate = p_[pos_ + 1] == '!';
        pos_ += 2;
      } else if ((k >= 'a' && k <= 'z') || k == '-') {
        ASTR_RETURN_IF_ERROR(ReadOptionLetters(&pos_, &inner));
        ++pos_;  // ':' (a bare "(?i)" was handled by the caller)
      } else if (k == '<' || k == 'P' || k == '\'') {
        return Error("named groups are not supported", start);
      } else {
        return Error("unsupported group syntax", start);
      }
    }
    // A plain "( )" is matched as a non-capturing group: matches report no captures.
    ASTR_ASSIGN_OR_RETURN(NodePtr body, ParseAlternation(inner, depth + 1));
    if (AtEnd() || p_[pos_] != ')') return Error("end pattern with unmatched parenthesis", start);
    ++pos_;
    if (wrapper == nullptr) return body;
    wrapper->children.push_back(std::move(body));
    return wrapper;
  }

  Status ReadHex(size_t min_digits, size_t max_digits, uint32_t* value, size_t offset) {
    size_t n = 0;
    uint64_t v = 0;
    while (n < max_digits && pos_ < p_.size() && IsHex(p_[pos_])) {
      v = v * 16 + HexValue(p_[pos_++]);
      ++n;
    }
    if (n < min_digits) return Error("invalid code point value", offset);
    if (v > unicode::kMaxCodepoint) return Error("code point value out of range", offset);
    *value = static_cast<uint32_t>(v);
    return OkStatus();
  }

  // Reads "{...}" holding hex (base 16) or octal (base 8) digits.
  Status ReadBraced(int base, uint32_t* value, size_t offset) {
    if (AtEnd() || p_[pos_] != '{') return Error("invalid code point value", offset);
    ++pos_;
    uint64_t v = 0;
    size_t n = 0;
    for (; !AtEnd() && p_[pos_] != '}'; ++pos_, ++n) {
      const char c = p_[pos_];
      const bool ok = base == 16 ? IsHex(c) : (c >= '0' && c <= '7');
      if (!ok || n >= 8) return Error("invalid code point value", offset);
      v = v * base + HexValue(c);
    }
    if (AtEnd() || n == 0) return Error("invalid code point value", offset);
    ++pos_;
    if (v > unicode::kMaxCodepoint) return Error("code point value out of range", offset);
    *value = static_cast<uint32_t>(v);
    return OkStatus();
  }

  // Parses the escape at pos_ ('\\') that denotes a character or a character set. Sets *set, or
  // *cp. Returns NotFound (not an error) for escapes that are neither, leaving pos_ unchanged.
  Status ParseCharEscape(bool in_class, CharSet* set, uint32_t* cp, bool* is_set) {
    const size_t start = pos_;
    if (pos_ + 1 >= p_.size()) return Error("end pattern at escape", start);
    const char c = p_[pos_ + 1];
    pos_ += 2;
    *is_set = true;
    switch (c) {
      case 'd':
        *set = DigitSet();
        return OkStatus();
      case 'D':
        *set = DigitSet().Complement();
        return OkStatus();
      case 's':
        *set = SpaceSet();
        return OkStatus();
      case 'S':
        *set = SpaceSet().Complement();
        return OkStatus();
      case 'w':
        *set = WordSet(in_class);
        return OkStatus();
      case 'W':
        *set = WordSet(in_class).Complement();
        return OkStatus();
      case 'h':
        *set = HexDigitSet();
        return OkStatus();
      case 'H':
        *set = HexDigitSet().Complement();
        return OkStatus();
      case 'p':
      case 'P':
        return ParseProperty(c == 'P', set, start);
      default:
        break;
    }
    *is_set = false;
    switch (c) {
      case 't':
        *cp = '\t';
        return OkStatus();
      case 'n':
        *cp = '\n';
        return OkStatus();
      case 'r':
        *cp = '\r';
        return OkStatus();
      case 'f':
        *cp = '\f';
        return OkStatus();
      case 'v':
        *cp = '\v';
        return OkStatus();
      case 'a':
        *cp = 0x07;
        return OkStatus();
      case 'e':
        *cp = 0x1B;
        return OkStatus();
      case 'x':
        if (!AtEnd() && p_[pos_] == '{') return ReadBraced(16, cp, start);
        return ReadHex(1, 2, cp, start);
      case 'u':
        return ReadHex(4, 4, cp, start);
      case 'o':
        return ReadBraced(8, cp, start);
      case '0': {
        uint32_t v = 0;
        for (int n = 0; n < 2 && !AtEnd() && p_[pos_] >= '0' && p_[pos_] <= '7'; ++n) {
          v = v * 8 + (p_[pos_++] - '0');
        }
        *cp = v;
        return OkStatus();
      }
      case 'c':
        if (AtEnd() || static_cast<unsigned char>(p_[pos_]) >= 0x80) {
          return Error("invalid control-code syntax", start);
        }
        *cp = static_cast<unsigned char>(p_[pos_++]) & 0x1F;
        return OkStatus();
      case 'b':
        if (in_class) {
          *cp = 0x08;
          return OkStatus();
        }
        break;
      default:
        break;
    }
    if (!IsAlnum(c)) {  // an escaped symbol or non-ASCII character stands for itself
      pos_ = start + 1;
      *cp = unicode::NextCodepoint(p_, pos_);
      return OkStatus();
    }
    pos_ = start;
    return NotFoundError("not a character escape");
  }

  Status ParseProperty(bool negated, CharSet* set, size_t start) {
    if (AtEnd() || p_[pos_] != '{') {
      return Error("\\p and \\P need a braced property name, e.g. \\p{L}", start);
    }
    const size_t close = p_.find('}', pos_);
    if (close == std::string_view::npos) return Error("invalid character property name", start);
    std::string_view name = p_.substr(pos_ + 1, close - pos_ - 1);
    pos_ = close + 1;
    if (!name.empty() && name[0] == '^') {
      negated = !negated;
      name.remove_prefix(1);
    }
    StatusOr<CharSet> prop = PropertySet(name);
    if (!prop.ok()) {
      return Error("invalid or unsupported character property name {" + std::string(name) + "}",
                   start);
    }
    *set = negated ? prop->Complement() : *std::move(prop);
    return OkStatus();
  }

  StatusOr<NodePtr> ParseEscape(const Flags& flags) {
    const size_t start = pos_;
    if (pos_ + 1 >= p_.size()) return Error("end pattern at escape", start);
    const char c = p_[pos_ + 1];
    static constexpr struct {
      char letter;
      AssertKind kind;
    } kAsserts[] = {{'A', AssertKind::kTextBegin},       {'z', AssertKind::kTextEnd},
                    {'Z', AssertKind::kTextEndNl},       {'b', AssertKind::kWordBoundary},
                    {'B', AssertKind::kNotWordBoundary}, {'G', AssertKind::kSearchStart}};
    for (const auto& a : kAsserts) {
      if (c == a.letter) {
        pos_ += 2;
        return AssertNode(a.kind, start);
      }
    }
    if (c == 'R') {
      pos_ += 2;
      return LinebreakNode(start);
    }
    CharSet set = CharSet::Empty();
    uint32_t cp = 0;
    bool is_set = false;
    const Status s = ParseCharEscape(false, &set, &cp, &is_set);
    if (s.code() == StatusCode::kNotFound) {
      if (c >= '1' && c <= '9') return Error("backreferences are not supported", start);
      return Error(std::string("unsupported escape \\") + c, start);
    }
    ASTR_RETURN_IF_ERROR(s);
    return SetNode(is_set ? std::move(set) : CharSet::Single(cp), flags, start);
  }

  // \R: (?>\r\n|[\n\v\f\r\x85\u2028\u2029]).
  NodePtr LinebreakNode(size_t offset) {
    auto crlf = MakeNode(Node::Kind::kConcat, offset);
    crlf->children.push_back(SetNode(CharSet::Single('\r'), Flags{}, offset));
    crlf->children.push_back(SetNode(CharSet::Single('\n'), Flags{}, offset));
    auto alt = MakeNode(Node::Kind::kAlt, offset);
    alt->children.push_back(std::move(crlf));
    alt->children.push_back(
        SetNode(CharSet::Ranges({{0x0A, 0x0D}, {0x85, 0x85}, {0x2028, 0x2029}}), Flags{}, offset));
    auto atomic = MakeNode(Node::Kind::kAtomic, offset);
    atomic->children.push_back(std::move(alt));
    return atomic;
  }

  // The body of a bracket class, after its '['; consumes the closing ']'. Case folding applies
  // to the positive set before a leading '^' negates it, as in Oniguruma.
  StatusOr<CharSet> ParseClassBody(const Flags& flags, int depth) {
    const size_t start = pos_ - 1;
    if (depth > kMaxNesting) return Error("character classes nested too deeply", start);
    bool negate = false;
    if (!AtEnd() && p_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    std::optional<CharSet> left;  // the operand before "&&"
    ClassAcc acc;
    bool acc_has_items = false;
    bool first = true;
    bool after_range = false;
    while (true) {
      if (AtEnd()) return Error("premature end of char-class", start);
      if (p_[pos_] == ']' && !first) {
        ++pos_;
        break;
      }
      if (p_.substr(pos_, 2) == "&&") {
        pos_ += 2;
        if (acc_has_items) left = left ? left->Intersect(acc.Take()) : acc.Take();
        acc = ClassAcc();
        acc_has_items = false;
        first = false;
        continue;
      }
      ASTR_RETURN_IF_ERROR(ParseClassItem(flags, depth, first, after_range, &acc, &after_range));
      acc_has_items = true;
      first = false;
    }
    CharSet result = acc.Take();
    if (left) result = acc_has_items ? left->Intersect(result) : *left;
    if (flags.ignore_case) result = result.CaseClosure();
    return negate ? result.Complement() : result;
  }

  // One element of a class: a character, a range "a-z", an escape, or a nested class.
  struct ClassElement {
    bool is_set = false;
    CharSet set = CharSet::Empty();
    uint32_t cp = 0;
  };

  Status ReadClassElement(const Flags& flags, int depth, ClassElement* e) {
    const size_t start = pos_;
    const char c = p_[pos_];
    if (c == '[') {
      if (pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') {
        const size_t close = p_.find(":]", pos_ + 2);
        if (close != std::string_view::npos) {
          return Error("POSIX bracket expressions ([:name:]) are not supported", start);
        }
      }
      ++pos_;
      e->is_set = true;
      ASTR_ASSIGN_OR_RETURN(e->set, ParseClassBody(flags, depth + 1));
      return OkStatus();
    }
    if (c == '\\') {
      Status s = ParseCharEscape(true, &e->set, &e->cp, &e->is_set);
      if (s.code() == StatusCode::kNotFound) {
        return Error(std::string("unsupported escape \\") + p_[pos_ + 1] + " in char-class", start);
      }
      return s;
    }
    size_t i = pos_;
    e->cp = unicode::NextCodepoint(p_, i);
    if (e->cp == unicode::kReplacementChar && i == pos_ + 1 &&
        static_cast<unsigned char>(p_[pos_]) >= 0x80) {
      return Error("invalid UTF-8 in pattern", pos_);
    }
    pos_ = i;
    return OkStatus();
  }

  // Literal characters and ranges are collected first and merged with the sets once at the end:
  // set unions cost time proportional to the ranges involved.
  struct ClassAcc {
    std::vector<CpRange> ranges;
    std::optional<CharSet> sets;
    CharSet Take() {
      CharSet out = CharSet::Ranges(std::move(ranges));
      return sets ? sets->Union(out) : out;
    }
    void Add(ClassElement& e) {
      if (!e.is_set) {
        ranges.push_back({e.cp, e.cp});
      } else {
        sets = sets ? sets->Union(e.set) : std::move(e.set);
      }
    }
  };

  Status ParseClassItem(const Flags& flags, int depth, bool first, bool after_range, ClassAcc* acc,
                        bool* is_range) {
    *is_range = false;
    const size_t start = pos_;
    const bool plain_dash = p_[pos_] == '-';
    ClassElement lo;
    ASTR_RETURN_IF_ERROR(ReadClassElement(flags, depth, &lo));
    const bool dash_follows = pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']';
    // A '-' that opens the class or follows a range is a literal, as is one before ']'.
    if (!dash_follows || (plain_dash && (first || after_range))) {
      acc->Add(lo);
      return OkStatus();
    }
    if (lo.is_set) return Error("unmatched range specifier in char-class", start);
    ++pos_;  // '-'
    const size_t hi_start = pos_;
    ClassElement hi;
    ASTR_RETURN_IF_ERROR(ReadClassElement(flags, depth, &hi));
    if (hi.is_set) return Error("char-class value at end of range", hi_start);
    if (hi.cp < lo.cp) return Error("empty range in char class", start);
    acc->ranges.push_back({lo.cp, hi.cp});
    *is_range = true;
    return OkStatus();
  }

  std::string_view p_;
  size_t pos_ = 0;
  std::vector<CharSet> sets_;
};

}  // namespace

StatusOr<ParsedPattern> ParsePattern(std::string_view pattern) {
  if (pattern.size() > (size_t{1} << 20)) {
    return InvalidArgumentError("regex: pattern longer than 1 MiB");
  }
  return Parser(pattern).Run();
}

}  // namespace astr::regex::internal
