// Compiles a parsed pattern to the flat instruction list that regex_match.cc runs.
//
// Layout decisions that matter for speed: a quantifier on a single-character set becomes one
// kRepeat instruction (no per-character backtrack frames); each alternation records, per branch,
// the set of characters that branch can start with, so the matcher only pushes a backtrack frame
// when a later branch could also match the next character.
#include <algorithm>
#include <string>

#include "common/text/regex/internal.h"

namespace astr::regex::internal {
namespace {

constexpr uint32_t kUnbounded = UINT32_MAX;

// What a node can start with: `first` holds every character it can consume first; when
// `nullable`, it can also match without consuming anything.
struct FirstInfo {
  bool nullable = true;
  CharSet first = CharSet::Empty();
};

class Compiler {
 public:
  Compiler(const ParsedPattern& parsed, std::string_view pattern)
      : parsed_(parsed), pattern_(pattern) {}

  StatusOr<Program> Run() {
    for (const CharSet& set : parsed_.sets) prog_.classes.emplace_back(set);
    prog_.pattern = std::string(pattern_);
    ASTR_RETURN_IF_ERROR(Emit(*parsed_.root, Context{}));
    ASTR_RETURN_IF_ERROR(Add(Inst{Op::kMatch}).status());
    const FirstInfo info = First(*parsed_.root);
    if (!info.nullable) prog_.start_class = AddClass(info.first);
    AssignMemoSlots();
    BuildAltTables();
    return std::move(prog_);
  }

 private:
  // What can follow the code being emitted, up to the end of the pattern (or of the enclosing
  // atomic group or lookaround, after which nothing backtracks into it).
  struct Follow {
    bool infallible = true;  // always reaches the end, whatever the text (then a greedy repeat
                             // never needs to give back)
    bool nullable = true;
    CharSet first = CharSet::Empty();
  };

  // Where the code being emitted sits: memoizing a state is only sound outside lookarounds and
  // outside loops whose iterations are checked for emptiness (their outcome depends on registers).
  struct Context {
    bool in_look = false;
    bool in_empty_loop = false;
    Follow follow;
    bool memoizable() const { return !in_look && !in_empty_loop; }
  };

  // True when `node` matches (possibly empty) at every position: no set it must consume, no
  // assertion that can fail.
  static bool Infallible(const Node& node) {
    switch (node.kind) {
      case Node::Kind::kEmpty:
        return true;
      case Node::Kind::kSet:
      case Node::Kind::kAssert:
      case Node::Kind::kLook:
        return false;
      case Node::Kind::kRepeat:
        return node.min == 0 || node.max == 0 || Infallible(*node.children[0]);
      case Node::Kind::kAtomic:
        return Infallible(*node.children[0]);
      case Node::Kind::kConcat:
        return std::all_of(node.children.begin(), node.children.end(),
                           [](const auto& c) { return Infallible(*c); });
      case Node::Kind::kAlt:
        return std::any_of(node.children.begin(), node.children.end(),
                           [](const auto& c) { return Infallible(*c); });
    }
    return false;
  }

  // The follow of code that is followed by `node` and then by `after`.
  Follow Prepend(const Node& node, const Follow& after) {
    const FirstInfo info = First(node);
    Follow out;
    out.infallible = after.infallible && Infallible(node);
    out.nullable = info.nullable && after.nullable;
    out.first = info.nullable ? info.first.Union(after.first) : info.first;
    return out;
  }

  // Greedy repetition of `set` need not give characters back when what follows always succeeds,
  // or must start with a character outside `set` (the classic auto-possessive rewrite).
  bool NoGiveBack(int set, const Follow& follow) {
    if (follow.infallible) return true;
    if (follow.nullable) return false;
    const CharSet common = parsed_.sets[set].Intersect(follow.first);
    return common.categories() == 0 && common.flips().empty();
  }

  uint32_t pc() const { return static_cast<uint32_t>(prog_.insts.size()); }

  StatusOr<uint32_t> Add(Inst inst) {
    if (prog_.insts.size() >= kMaxInstructions) {
      return InvalidArgumentError(
          "regex: pattern too large after expanding counted repeats "
          "(more than 65536 instructions): \"" +
          std::string(pattern_) + "\"");
    }
    prog_.insts.push_back(inst);
    return pc() - 1;
  }

  int AddClass(const CharSet& set) {
    prog_.classes.emplace_back(set);
    return static_cast<int>(prog_.classes.size()) - 1;
  }

  FirstInfo First(const Node& node) {
    FirstInfo out;
    switch (node.kind) {
      case Node::Kind::kEmpty:
      case Node::Kind::kAssert:
      case Node::Kind::kLook:
        return out;
      case Node::Kind::kSet:
        out.nullable = false;
        out.first = parsed_.sets[node.set];
        return out;
      case Node::Kind::kAtomic:
        return First(*node.children[0]);
      case Node::Kind::kRepeat: {
        if (node.max == 0) return out;
        out = First(*node.children[0]);
        if (node.min == 0) out.nullable = true;
        return out;
      }
      case Node::Kind::kConcat:
        for (const auto& child : node.children) {
          const FirstInfo c = First(*child);
          out.first = out.first.Union(c.first);
          if (!c.nullable) {
            out.nullable = false;
            break;
          }
        }
        return out;
      case Node::Kind::kAlt:
        out.nullable = false;
        for (const auto& child : node.children) {
          const FirstInfo c = First(*child);
          out.first = out.first.Union(c.first);
          out.nullable = out.nullable || c.nullable;
        }
        return out;
    }
    return out;
  }

  // The branch filter for code starting with `node` (then the rest of the pattern).
  int FilterFor(const Node& node) {
    const FirstInfo info = First(node);
    if (info.nullable) return -1;
    if (node.kind == Node::Kind::kSet) return node.set;
    return AddClass(info.first);
  }

  Status Emit(const Node& node, const Context& ctx) {
    switch (node.kind) {
      case Node::Kind::kEmpty:
        return OkStatus();
      case Node::Kind::kSet: {
        Inst inst{Op::kSet};
        inst.arg = static_cast<uint32_t>(node.set);
        return Add(inst).status();
      }
      case Node::Kind::kConcat: {
        if (node.children.empty()) return OkStatus();
        // Follows of the children, computed right to left.
        std::vector<Follow> follows(node.children.size());
        follows.back() = ctx.follow;
        for (size_t k = node.children.size() - 1; k > 0; --k) {
          follows[k - 1] = Prepend(*node.children[k], follows[k]);
        }
        Context child_ctx = ctx;
        for (size_t k = 0; k < node.children.size(); ++k) {
          child_ctx.follow = std::move(follows[k]);
          ASTR_RETURN_IF_ERROR(Emit(*node.children[k], child_ctx));
        }
        return OkStatus();
      }
      case Node::Kind::kAlt:
        return EmitAlt(node, ctx);
      case Node::Kind::kRepeat:
        return EmitRepeat(node, ctx);
      case Node::Kind::kAtomic: {
        ASTR_RETURN_IF_ERROR(Add(Inst{Op::kAtomicBegin}).status());
        Context inner = ctx;
        inner.follow = Follow{};
        ASTR_RETURN_IF_ERROR(Emit(*node.children[0], inner));
        return Add(Inst{Op::kAtomicEnd}).status();
      }
      case Node::Kind::kLook:
        return node.behind ? EmitLookBehind(node, ctx) : EmitLook(node, *node.children[0], 0, ctx);
      case Node::Kind::kAssert: {
        Inst inst{Op::kAssert};
        inst.arg = static_cast<uint32_t>(node.assert_kind);
        if (node.assert_kind == AssertKind::kSearchStart) uses_search_start_ = true;
        return Add(inst).status();
      }
    }
    return InternalError("regex: unknown node kind");
  }

  // kAlt over the children, each followed by a jump to the end (except the last).
  Status EmitAlt(const Node& node, const Context& ctx) {
    std::vector<const Node*> branches;
    for (const auto& child : node.children) branches.push_back(child.get());
    return EmitBranches(branches, ctx);
  }

  // Emits "try each of `nodes` in order": a kAlt, then each branch followed by a jump to the end.
  Status EmitBranches(const std::vector<const Node*>& nodes, const Context& ctx) {
    Inst alt{Op::kAlt};
    alt.memoizable = ctx.memoizable();
    const size_t first_branch = prog_.branches.size();
    alt.x = static_cast<uint32_t>(first_branch);
    alt.y = static_cast<uint32_t>(nodes.size());
    prog_.branches.resize(first_branch + nodes.size());
    ASTR_RETURN_IF_ERROR(Add(alt).status());
    std::vector<uint32_t> jumps;
    for (size_t k = 0; k < nodes.size(); ++k) {
      prog_.branches[first_branch + k] = {pc(), FilterFor(*nodes[k])};
      ASTR_RETURN_IF_ERROR(Emit(*nodes[k], ctx));
      if (k + 1 < nodes.size()) {
        ASTR_ASSIGN_OR_RETURN(uint32_t jump, Add(Inst{Op::kJump}));
        jumps.push_back(jump);
      }
    }
    for (uint32_t jump : jumps) prog_.insts[jump].x = pc();
    return OkStatus();
  }

  bool IsNullable(const Node& node) { return First(node).nullable; }

  Status EmitRepeat(const Node& node, const Context& ctx) {
    const Node& child = *node.children[0];
    const uint32_t max = node.max < 0 ? kUnbounded : static_cast<uint32_t>(node.max);
    if (max == 0) return OkStatus();
    if (child.kind == Node::Kind::kSet) {
      Inst inst{Op::kRepeat};
      inst.arg = static_cast<uint32_t>(child.set);
      inst.min = static_cast<uint32_t>(node.min);
      inst.max = max;
      inst.mode = node.mode;
      if (inst.mode == RepeatMode::kGreedy && NoGiveBack(child.set, ctx.follow)) {
        inst.mode = RepeatMode::kPossessive;
      }
      inst.memoizable = ctx.memoizable() && max == kUnbounded;
      return Add(inst).status();
    }
    // After one iteration comes another or what follows the loop.
    Context body = ctx;
    const FirstInfo child_info = First(child);
    body.follow.infallible = false;
    body.follow.nullable = ctx.follow.nullable || child_info.nullable;
    body.follow.first = child_info.first.Union(ctx.follow.first);
    if (node.mode == RepeatMode::kPossessive) {
      ASTR_RETURN_IF_ERROR(Add(Inst{Op::kAtomicBegin}).status());
      body.follow = Follow{};
      ASTR_RETURN_IF_ERROR(EmitGeneralRepeat(child, node.min, max, false, body));
      return Add(Inst{Op::kAtomicEnd}).status();
    }
    return EmitGeneralRepeat(child, node.min, max, node.mode == RepeatMode::kLazy, body);
  }

  // child{min,max} by expansion: min copies, then either a loop or max-min nested optionals.
  Status EmitGeneralRepeat(const Node& child, int min, uint32_t max, bool lazy,
                           const Context& ctx) {
    for (int k = 0; k < min; ++k) ASTR_RETURN_IF_ERROR(Emit(child, ctx));
    if (max == kUnbounded) return EmitStar(child, lazy, ctx);
    std::vector<uint32_t> alts;
    for (uint32_t k = static_cast<uint32_t>(min); k < max; ++k) {
      ASTR_ASSIGN_OR_RETURN(uint32_t alt, EmitOptionalHead(child, lazy, ctx));
      alts.push_back(alt);
      ASTR_RETURN_IF_ERROR(Emit(child, ctx));
    }
    for (uint32_t alt : alts) PatchOptionalExit(alt, lazy, pc());
    return OkStatus();
  }

  // A two-branch kAlt whose "take the child" branch starts right after it; the "skip" branch's
  // target is patched once the end is known. Returns the kAlt's pc.
  StatusOr<uint32_t> EmitOptionalHead(const Node& child, bool lazy, const Context& ctx) {
    Inst alt{Op::kAlt};
    alt.memoizable = ctx.memoizable();
    alt.x = static_cast<uint32_t>(prog_.branches.size());
    alt.y = 2;
    ASTR_ASSIGN_OR_RETURN(uint32_t at, Add(alt));
    const Branch take{pc(), FilterFor(child)};
    const Branch skip{0, -1};
    prog_.branches.push_back(lazy ? skip : take);
    prog_.branches.push_back(lazy ? take : skip);
    return at;
  }

  void PatchOptionalExit(uint32_t alt_pc, bool lazy, uint32_t exit) {
    prog_.branches[prog_.insts[alt_pc].x + (lazy ? 0 : 1)].pc = exit;
  }

  // child*: loop: kAlt [body, exit]; body: child; jump loop. A child that can match empty gets
  // Oniguruma's empty check: an iteration that consumed nothing ends the loop.
  Status EmitStar(const Node& child, bool lazy, const Context& ctx) {
    const bool nullable = IsNullable(child);
    Context inner = ctx;
    if (nullable) inner.in_empty_loop = true;
    ASTR_ASSIGN_OR_RETURN(uint32_t loop, EmitOptionalHead(child, lazy, ctx));
    uint32_t check = 0;
    const uint32_t reg = prog_.num_registers;
    if (nullable) {
      ++prog_.num_registers;
      Inst mark{Op::kMark};
      mark.arg = reg;
      ASTR_RETURN_IF_ERROR(Add(mark).status());
    }
    ASTR_RETURN_IF_ERROR(Emit(child, inner));
    if (nullable) {
      Inst ce{Op::kCheckEmpty};
      ce.arg = reg;
      ASTR_ASSIGN_OR_RETURN(check, Add(ce));
    }
    Inst jump{Op::kJump};
    jump.x = loop;
    ASTR_RETURN_IF_ERROR(Add(jump).status());
    PatchOptionalExit(loop, lazy, pc());
    if (nullable) prog_.insts[check].x = pc();
    return OkStatus();
  }

  // Lookahead, or lookbehind over `length` characters (the body then runs from that many
  // characters back and must end where the lookaround began).
  Status EmitLook(const Node& look, const Node& body, uint32_t length, const Context& ctx) {
    Inst begin{Op::kLookBegin};
    begin.negate = look.negate;
    begin.behind = look.behind;
    begin.arg = length;
    ASTR_ASSIGN_OR_RETURN(uint32_t at, Add(begin));
    Context inner = ctx;
    inner.in_look = true;
    // A lookahead body is done once it reaches its end; a lookbehind body must also end at the
    // right place, so nothing is assumed about giving back there.
    inner.follow = Follow{};
    if (look.behind) inner.follow.infallible = false;
    ASTR_RETURN_IF_ERROR(Emit(body, inner));
    ASTR_RETURN_IF_ERROR(Add(Inst{Op::kLookEnd}).status());
    prog_.insts[at].x = pc();
    return OkStatus();
  }

  // Number of characters `node` always matches, or -1 if it varies.
  int64_t FixedLength(const Node& node) {
    switch (node.kind) {
      case Node::Kind::kEmpty:
      case Node::Kind::kAssert:
      case Node::Kind::kLook:
        return 0;
      case Node::Kind::kSet:
        return 1;
      case Node::Kind::kAtomic:
        return FixedLength(*node.children[0]);
      case Node::Kind::kRepeat: {
        if (node.min != node.max) return -1;
        const int64_t c = FixedLength(*node.children[0]);
        return c < 0 ? -1 : c * node.min;
      }
      case Node::Kind::kConcat: {
        int64_t total = 0;
        for (const auto& child : node.children) {
          const int64_t c = FixedLength(*child);
          if (c < 0) return -1;
          total += c;
        }
        return total;
      }
      case Node::Kind::kAlt: {
        int64_t len = -2;
        for (const auto& child : node.children) {
          const int64_t c = FixedLength(*child);
          if (c < 0 || (len != -2 && c != len)) return -1;
          len = c;
        }
        return len < 0 ? -1 : len;
      }
    }
    return -1;
  }

  // A lookbehind whose top-level alternatives have different fixed lengths is split into one
  // lookbehind per alternative: (?<=a|bc) = (?:(?<=a)|(?<=bc)), (?<!a|bc) = (?<!a)(?<!bc).
  Status EmitLookBehind(const Node& look, const Context& ctx) {
    const Node& body = *look.children[0];
    const int64_t len = FixedLength(body);
    if (len >= 0) return EmitLook(look, body, static_cast<uint32_t>(len), ctx);
    if (body.kind != Node::Kind::kAlt) return VariableLookBehind(look);
    for (const auto& alt : body.children) {
      if (FixedLength(*alt) < 0) return VariableLookBehind(look);
    }
    if (look.negate) {
      for (const auto& alt : body.children) {
        ASTR_RETURN_IF_ERROR(EmitLook(look, *alt, static_cast<uint32_t>(FixedLength(*alt)), ctx));
      }
      return OkStatus();
    }
    // Positive: an alternation of single-alternative lookbehinds, built as temporary nodes.
    std::vector<std::unique_ptr<Node>> parts;
    std::vector<const Node*> branches;
    for (const auto& alt : body.children) {
      auto part = std::make_unique<Node>();
      part->kind = Node::Kind::kLook;
      part->behind = true;
      part->offset = look.offset;
      part->children.push_back(Clone(*alt));
      branches.push_back(part.get());
      parts.push_back(std::move(part));
    }
    return EmitBranches(branches, ctx);
  }

  // The lookbehind split needs a new Node per alternative; the tree is const, so they are copies.
  std::unique_ptr<Node> Clone(const Node& node) {
    auto copy = std::make_unique<Node>();
    copy->kind = node.kind;
    copy->set = node.set;
    copy->min = node.min;
    copy->max = node.max;
    copy->mode = node.mode;
    copy->negate = node.negate;
    copy->behind = node.behind;
    copy->assert_kind = node.assert_kind;
    copy->offset = node.offset;
    for (const auto& child : node.children) copy->children.push_back(Clone(*child));
    return copy;
  }

  Status VariableLookBehind(const Node& look) {
    return InvalidArgumentError("regex: lookbehind of variable length at offset " +
                                std::to_string(look.offset) + " in pattern \"" +
                                std::string(pattern_) +
                                "\" (each alternative must match a "
                                "fixed number of characters)");
  }

  void BuildAltTables() {
    for (Inst& inst : prog_.insts) {
      if (inst.op != Op::kAlt) continue;
      inst.arg = kNoAsciiTable;
      if (inst.y >= AltChoice::kNone) continue;
      inst.arg = static_cast<uint32_t>(prog_.alt_ascii.size());
      for (uint32_t c = 0; c < 128; ++c) {
        AltChoice choice{AltChoice::kNone, AltChoice::kNone};
        for (uint32_t k = 0; k < inst.y; ++k) {
          const Branch& b = prog_.branches[inst.x + k];
          if (b.first >= 0 && !prog_.classes[b.first].Matches(c)) continue;
          if (choice.first == AltChoice::kNone) {
            choice.first = static_cast<uint8_t>(k);
          } else {
            choice.second = static_cast<uint8_t>(k);
            break;
          }
        }
        prog_.alt_ascii.push_back(choice);
      }
    }
  }

  void AssignMemoSlots() {
    for (Inst& inst : prog_.insts) {
      // \G makes a state's outcome depend on where its search began, so nothing is memoized.
      if (uses_search_start_) inst.memoizable = false;
      if (inst.memoizable) inst.memo_slot = prog_.num_memo_slots++;
    }
  }

  const ParsedPattern& parsed_;
  std::string_view pattern_;
  Program prog_;
  bool uses_search_start_ = false;
};

}  // namespace

StatusOr<Program> CompileProgram(const ParsedPattern& parsed, std::string_view pattern) {
  return Compiler(parsed, pattern).Run();
}

}  // namespace astr::regex::internal
