// CharSet algebra, the predefined sets and \p{..} names, and the matcher's ClassMatcher.
#include <algorithm>
#include <array>
#include <string>

#include "common/text/regex/internal.h"
#include "common/text/unicode/data.h"

namespace astr::regex::internal {
namespace {

using unicode::Category;
using unicode::CategoryBit;

constexpr uint32_t kAllCategories = (uint32_t{1} << unicode::kNumCategories) - 1;

constexpr uint32_t Mask(std::initializer_list<Category> cats) {
  uint32_t mask = 0;
  for (Category c : cats) mask |= CategoryBit(c);
  return mask;
}

constexpr uint32_t kLetters =
    Mask({Category::kLu, Category::kLl, Category::kLt, Category::kLm, Category::kLo});
constexpr uint32_t kMarks = Mask({Category::kMn, Category::kMc, Category::kMe});
constexpr uint32_t kNumbers = Mask({Category::kNd, Category::kNl, Category::kNo});
constexpr uint32_t kPunctuation = Mask({Category::kPc, Category::kPd, Category::kPs, Category::kPe,
                                        Category::kPi, Category::kPf, Category::kPo});
constexpr uint32_t kSymbols = Mask({Category::kSm, Category::kSc, Category::kSk, Category::kSo});
constexpr uint32_t kSeparators = Mask({Category::kZs, Category::kZl, Category::kZp});
constexpr uint32_t kOthers =
    Mask({Category::kCc, Category::kCf, Category::kCs, Category::kCo, Category::kCn});

struct PropertyName {
  const char* name;  // lowercase, without '_', '-' and ' '
  uint32_t mask;
};

// General_Category values and their long names (PropertyValueAliases.txt). The POSIX-flavoured
// aliases (digit, punct, cntrl) are left out on purpose: Oniguruma gives them other meanings.
constexpr PropertyName kPropertyNames[] = {
    {"l", kLetters},
    {"letter", kLetters},
    {"lc", Mask({Category::kLu, Category::kLl, Category::kLt})},
    {"casedletter", Mask({Category::kLu, Category::kLl, Category::kLt})},
    {"lu", CategoryBit(Category::kLu)},
    {"uppercaseletter", CategoryBit(Category::kLu)},
    {"ll", CategoryBit(Category::kLl)},
    {"lowercaseletter", CategoryBit(Category::kLl)},
    {"lt", CategoryBit(Category::kLt)},
    {"titlecaseletter", CategoryBit(Category::kLt)},
    {"lm", CategoryBit(Category::kLm)},
    {"modifierletter", CategoryBit(Category::kLm)},
    {"lo", CategoryBit(Category::kLo)},
    {"otherletter", CategoryBit(Category::kLo)},
    {"m", kMarks},
    {"mark", kMarks},
    {"combiningmark", kMarks},
    {"mn", CategoryBit(Category::kMn)},
    {"nonspacingmark", CategoryBit(Category::kMn)},
    {"mc", CategoryBit(Category::kMc)},
    {"spacingmark", CategoryBit(Category::kMc)},
    {"me", CategoryBit(Category::kMe)},
    {"enclosingmark", CategoryBit(Category::kMe)},
    {"n", kNumbers},
    {"number", kNumbers},
    {"nd", CategoryBit(Category::kNd)},
    {"decimalnumber", CategoryBit(Category::kNd)},
    {"nl", CategoryBit(Category::kNl)},
    {"letternumber", CategoryBit(Category::kNl)},
    {"no", CategoryBit(Category::kNo)},
    {"othernumber", CategoryBit(Category::kNo)},
    {"p", kPunctuation},
    {"punctuation", kPunctuation},
    {"pc", CategoryBit(Category::kPc)},
    {"connectorpunctuation", CategoryBit(Category::kPc)},
    {"pd", CategoryBit(Category::kPd)},
    {"dashpunctuation", CategoryBit(Category::kPd)},
    {"ps", CategoryBit(Category::kPs)},
    {"openpunctuation", CategoryBit(Category::kPs)},
    {"pe", CategoryBit(Category::kPe)},
    {"closepunctuation", CategoryBit(Category::kPe)},
    {"pi", CategoryBit(Category::kPi)},
    {"initialpunctuation", CategoryBit(Category::kPi)},
    {"pf", CategoryBit(Category::kPf)},
    {"finalpunctuation", CategoryBit(Category::kPf)},
    {"po", CategoryBit(Category::kPo)},
    {"otherpunctuation", CategoryBit(Category::kPo)},
    {"s", kSymbols},
    {"symbol", kSymbols},
    {"sm", CategoryBit(Category::kSm)},
    {"mathsymbol", CategoryBit(Category::kSm)},
    {"sc", CategoryBit(Category::kSc)},
    {"currencysymbol", CategoryBit(Category::kSc)},
    {"sk", CategoryBit(Category::kSk)},
    {"modifiersymbol", CategoryBit(Category::kSk)},
    {"so", CategoryBit(Category::kSo)},
    {"othersymbol", CategoryBit(Category::kSo)},
    {"z", kSeparators},
    {"separator", kSeparators},
    {"zs", CategoryBit(Category::kZs)},
    {"spaceseparator", CategoryBit(Category::kZs)},
    {"zl", CategoryBit(Category::kZl)},
    {"lineseparator", CategoryBit(Category::kZl)},
    {"zp", CategoryBit(Category::kZp)},
    {"paragraphseparator", CategoryBit(Category::kZp)},
    {"c", kOthers},
    {"other", kOthers},
    {"cc", CategoryBit(Category::kCc)},
    {"control", CategoryBit(Category::kCc)},
    {"cf", CategoryBit(Category::kCf)},
    {"format", CategoryBit(Category::kCf)},
    {"cs", CategoryBit(Category::kCs)},
    {"surrogate", CategoryBit(Category::kCs)},
    {"co", CategoryBit(Category::kCo)},
    {"privateuse", CategoryBit(Category::kCo)},
    {"cn", CategoryBit(Category::kCn)},
    {"unassigned", CategoryBit(Category::kCn)},
    {"any", kAllCategories},
    {"assigned", kAllCategories & ~CategoryBit(Category::kCn)},
};

std::vector<CpRange> PairsToRanges(const uint32_t* pairs, size_t size) {
  std::vector<CpRange> out;
  for (size_t k = 0; k + 1 < size; k += 2) out.push_back({pairs[k], pairs[k + 1]});
  return out;
}

bool RangesContain(const std::vector<CpRange>& ranges, uint32_t cp) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t v, const CpRange& r) { return v < r.lo; });
  return it != ranges.begin() && cp <= std::prev(it)->hi;
}

// Appends cp to sorted ranges, extending the last range when adjacent.
void AppendCp(std::vector<CpRange>& ranges, uint32_t cp) {
  if (!ranges.empty() && ranges.back().hi + 1 == cp) {
    ranges.back().hi = cp;
  } else {
    ranges.push_back({cp, cp});
  }
}

// Simple case folding equivalence classes with more than one member, each sorted, built once.
const std::vector<std::vector<uint32_t>>& CaseClasses() {
  static const std::vector<std::vector<uint32_t>> classes = [] {
    std::vector<std::pair<uint32_t, uint32_t>> by_fold;  // (fold, member)
    for (size_t k = 0; k < unicode::internal::kFoldKeysSize; ++k) {
      const uint32_t fold = unicode::internal::kFoldValues[k];
      by_fold.push_back({fold, unicode::internal::kFoldKeys[k]});
      by_fold.push_back({fold, fold});
    }
    std::sort(by_fold.begin(), by_fold.end());
    by_fold.erase(std::unique(by_fold.begin(), by_fold.end()), by_fold.end());
    std::vector<std::vector<uint32_t>> out;
    for (size_t i = 0; i < by_fold.size();) {
      std::vector<uint32_t> members;
      size_t j = i;
      for (; j < by_fold.size() && by_fold[j].first == by_fold[i].first; ++j) {
        members.push_back(by_fold[j].second);
      }
      out.push_back(std::move(members));
      i = j;
    }
    return out;
  }();
  return classes;
}

}  // namespace

CharSet CharSet::Ranges(std::vector<CpRange> ranges) {
  for (CpRange& r : ranges) r.hi = std::min(r.hi, unicode::kMaxCodepoint);
  ranges.erase(
      std::remove_if(ranges.begin(), ranges.end(), [](const CpRange& r) { return r.lo > r.hi; }),
      ranges.end());
  std::sort(ranges.begin(), ranges.end(),
            [](const CpRange& a, const CpRange& b) { return a.lo < b.lo; });
  std::vector<CpRange> merged;
  for (const CpRange& r : ranges) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  return CharSet(0, std::move(merged));
}

bool CharSet::InFlips(uint32_t cp) const { return RangesContain(flips_, cp); }

bool CharSet::Contains(uint32_t cp) const {
  if (cp > unicode::kMaxCodepoint) return false;
  const bool in_category = (categories_ >> static_cast<int>(unicode::GetCategory(cp))) & 1;
  return in_category != InFlips(cp);
}

CharSet CharSet::Complement() const { return CharSet(~categories_ & kAllCategories, flips_); }

template <typename Op>
CharSet CharSet::Combine(const CharSet& other, uint32_t mask, Op op) const {
  // Outside both flip lists each operand is decided by its category mask alone, so the result is
  // decided by `mask` there; only code points inside some flip range can need a flip.
  std::vector<CpRange> candidates = flips_;
  candidates.insert(candidates.end(), other.flips_.begin(), other.flips_.end());
  const CharSet merged = Ranges(std::move(candidates));
  std::vector<CpRange> flips;
  for (const CpRange& r : merged.flips_) {
    for (uint32_t cp = r.lo; cp <= r.hi; ++cp) {
      const bool in = op(Contains(cp), other.Contains(cp));
      const bool by_mask = (mask >> static_cast<int>(unicode::GetCategory(cp))) & 1;
      if (in != by_mask) AppendCp(flips, cp);
    }
  }
  return CharSet(mask, std::move(flips));
}

CharSet CharSet::Union(const CharSet& other) const {
  return Combine(other, categories_ | other.categories_, [](bool a, bool b) { return a || b; });
}

CharSet CharSet::Intersect(const CharSet& other) const {
  return Combine(other, categories_ & other.categories_, [](bool a, bool b) { return a && b; });
}

CharSet CharSet::CaseClosure() const {
  std::vector<CpRange> added;
  for (const std::vector<uint32_t>& members : CaseClasses()) {
    const bool any =
        std::any_of(members.begin(), members.end(), [this](uint32_t cp) { return Contains(cp); });
    if (!any) continue;
    for (uint32_t cp : members) {
      if (!Contains(cp)) added.push_back({cp, cp});
    }
  }
  if (added.empty()) return *this;
  return Union(Ranges(std::move(added)));
}

StatusOr<CharSet> PropertySet(std::string_view name) {
  std::string key;
  for (char c : name) {
    if (c == '_' || c == ' ' || c == '-') continue;
    key.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
  }
  if (key == "ascii") return CharSet::Ranges({{0, 0x7F}});
  for (const PropertyName& p : kPropertyNames) {
    if (key == p.name) return CharSet::Categories(p.mask);
  }
  return NotFoundError("unknown property name");
}

CharSet DigitSet() { return CharSet::Categories(CategoryBit(Category::kNd)); }

CharSet SpaceSet() {
  return CharSet::Ranges(PairsToRanges(unicode::internal::kWhiteSpaceRanges,
                                       unicode::internal::kWhiteSpaceRangesSize));
}

CharSet WordSet(bool in_class) {
  const uint32_t mask = kLetters | kMarks | CategoryBit(Category::kNd) |
                        CategoryBit(Category::kNl) | CategoryBit(Category::kPc);
  std::vector<CpRange> extra =
      PairsToRanges(unicode::internal::kWordExtraRanges, unicode::internal::kWordExtraRangesSize);
  if (!in_class) {
    const std::vector<CpRange> outside =
        PairsToRanges(unicode::internal::kWordExtraOutsideClassRanges,
                      unicode::internal::kWordExtraOutsideClassRangesSize);
    extra.insert(extra.end(), outside.begin(), outside.end());
  }
  return CharSet::Categories(mask).Union(CharSet::Ranges(std::move(extra)));
}

CharSet HexDigitSet() { return CharSet::Ranges({{'0', '9'}, {'A', 'F'}, {'a', 'f'}}); }

CharSet NotNewlineSet() { return CharSet::Single('\n').Complement(); }

ClassMatcher::ClassMatcher(const CharSet& set) : categories(set.categories()) {
  for (uint32_t cp = 0; cp < 128; ++cp) {
    if (set.Contains(cp)) ascii[cp >> 6] |= uint64_t{1} << (cp & 63);
  }
  for (const CpRange& r : set.flips()) {
    if (r.hi < 128) continue;
    flips.push_back({std::max<uint32_t>(r.lo, 128), r.hi});
  }
  if (!flips.empty()) {
    flips_lo = flips.front().lo;
    flips_hi = flips.back().hi;
  }
}

bool ClassMatcher::InFlips(uint32_t cp) const { return RangesContain(flips, cp); }

}  // namespace astr::regex::internal
