#include "common/chat/jinja/lexer.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "common/chat/jinja/text.h"

namespace astr::jinja {
namespace {

enum class TagKind { kVariable, kBlock, kComment };

bool IsIdentStart(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}
bool IsIdentChar(unsigned char c) { return IsIdentStart(c) || (c >= '0' && c <= '9'); }
bool IsDigitChar(char c) { return c >= '0' && c <= '9'; }

// Length of the Python-whitespace run (\s*) starting at `pos`.
size_t SkipSpace(std::string_view s, size_t pos) {
  size_t p = pos;
  while (p < s.size()) {
    size_t len = 1;
    char32_t c = text::DecodeAt(s, p, &len);
    if (!text::IsSpace(c)) break;
    p += len;
  }
  return p;
}

// str.rstrip(): length of `s` without trailing Python whitespace.
size_t RStripLength(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) {
      --start;
    }
    size_t len = 1;
    char32_t c = text::DecodeAt(s, start, &len);
    if (start + len != end) {
      start = end - 1;
      c = static_cast<unsigned char>(s[start]);
    }
    if (!text::IsSpace(c)) break;
    end = start;
  }
  return end;
}

// True when `s` is non-empty and all Python whitespace.
bool AllSpace(std::string_view s) { return !s.empty() && SkipSpace(s, 0) == s.size(); }

// Unescapes the escape sequence of a string literal whose backslash precedes `p`, with Python's
// unicode-escape rules (what jinja2 applies). Returns the position after the sequence.
StatusOr<size_t> AppendEscape(std::string_view src, size_t p, std::string* out) {
  char e = src[p++];
  static constexpr std::string_view kSimple = "abfnrtv\\'\"";
  static constexpr std::string_view kSimpleValue = "\a\b\f\n\r\t\v\\'\"";
  if (e == '\n') return p;  // line continuation
  if (size_t k = kSimple.find(e); k != std::string_view::npos) {
    *out += kSimpleValue[k];
    return p;
  }
  if (e == 'x' || e == 'u' || e == 'U') {
    int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
    std::string what = e == 'x' ? "\\xXX" : e == 'u' ? "\\uXXXX" : "\\UXXXXXXXX";
    char32_t v = 0;
    for (int k = 0; k < n; ++k) {
      char h = p + k < src.size() ? src[p + k] : '\0';
      int d = IsDigitChar(h)           ? h - '0'
              : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                       : -1;
      if (d < 0) return InvalidArgumentError("truncated " + what + " escape");
      v = v * 16 + d;
    }
    if (v > 0x10FFFF) return InvalidArgumentError("illegal Unicode character");
    text::AppendUtf8(out, v);
    return p + n;
  }
  if (e >= '0' && e <= '7') {
    char32_t v = e - '0';
    for (int k = 0; k < 2 && p < src.size() && src[p] >= '0' && src[p] <= '7'; ++k) {
      v = v * 8 + (src[p++] - '0');
    }
    text::AppendUtf8(out, v);
    return p;
  }
  if (static_cast<unsigned char>(e) >= 0x80) {
    // jinja2 backslash-replaces non-ASCII text before unescaping: "\\é" reads as "\\xe9".
    size_t len = 1;
    char32_t c = text::DecodeAt(src, p - 1, &len);
    char buf[16];
    std::snprintf(buf, sizeof(buf),
                  c < 0x100     ? "\\x%02x"
                  : c < 0x10000 ? "\\u%04x"
                                : "\\U%08x",
                  static_cast<unsigned>(c));
    *out += buf;
    return p - 1 + len;
  }
  *out += '\\';  // unknown escapes stay as written
  *out += e;
  return p;
}

const char* const kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                  "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                  "=",  ".",  ":",  "|",  ",",  ";",  ">", "<"};

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options)
      : src_(std::move(source)), options_(options) {}

  StatusOr<std::vector<Token>> Run();

 private:
  Status Error(size_t pos, const std::string& what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) {
        ++col;
      }
    }
    return InvalidArgumentError("line " + std::to_string(line) + ", column " + std::to_string(col) +
                                ": " + what);
  }
  void Emit(TokenType type, std::string text, size_t pos) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    Position(pos, &t.line, &t.column);
    tokens_.push_back(std::move(t));
  }
  // Incremental line / column of byte offset `pos` (offsets are requested in increasing order).
  void Position(size_t pos, int* line, int* col) {
    while (cursor_ < pos && cursor_ < src_.size()) {
      if (src_[cursor_] == '\n') {
        ++line_;
        col_ = 1;
      } else if ((static_cast<unsigned char>(src_[cursor_]) & 0xC0) != 0x80) {
        ++col_;
      }
      ++cursor_;
    }
    *line = line_;
    *col = col_;
  }
  // Applies `-` / lstrip_blocks to the text before a tag and emits it.
  void EmitText(size_t begin, size_t end, char sign, bool is_variable);
  // Position after a block / comment closer at `pos` ("%}" or "#}") with `-`, `+`, trim_blocks.
  size_t AfterCloser(size_t pos, char sign);
  bool MatchRawBegin(size_t pos, size_t* end);
  Status LexComment(size_t* pos);
  Status LexRaw(size_t* pos);
  Status LexTag(size_t* pos, TagKind kind);
  Status LexString(size_t* pos);
  // Number tokens; false when `pos` does not start one.
  bool LexNumber(size_t* pos, Status* error);
  bool LexFloat(size_t* pos);
  // End of a `(\d+_)*\d+` run starting at `q`, or npos.
  size_t DigitsEnd(size_t q) const;
  std::string WithoutUnderscores(size_t begin, size_t end) const;

  std::string src_;
  LexerOptions options_;
  std::vector<Token> tokens_;
  bool line_starting_ = true;
  size_t cursor_ = 0;
  int line_ = 1;
  int col_ = 1;
};

void Lexer::EmitText(size_t begin, size_t end, char sign, bool is_variable) {
  std::string_view text(src_.data() + begin, end - begin);
  if (sign == '-') {
    text = text.substr(0, RStripLength(text));
  } else if (sign != '+' && options_.lstrip_blocks && !is_variable) {
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting_) && AllSpace(text.substr(l_pos))) text = text.substr(0, l_pos);
  }
  if (!text.empty()) Emit(TokenType::kData, std::string(text), begin);
}

size_t Lexer::AfterCloser(size_t pos, char sign) {
  // `pos` points at the closer's first character ("%}" / "#}"), the sign (if any) precedes it.
  size_t end = pos + 2;
  if (sign == '-') {
    end = SkipSpace(src_, end);
  } else if (sign != '+' && options_.trim_blocks && end < src_.size() && src_[end] == '\n') {
    ++end;
  }
  line_starting_ = end > 0 && src_[end - 1] == '\n';
  return end;
}

bool Lexer::MatchRawBegin(size_t pos, size_t* end) {
  // {%(-|+|)\s*raw\s*(-%}\s*|%})
  size_t p = pos + 2;
  if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
  p = SkipSpace(src_, p);
  if (src_.compare(p, 3, "raw") != 0) return false;
  p = SkipSpace(src_, p + 3);
  if (src_.compare(p, 3, "-%}") == 0) {
    *end = SkipSpace(src_, p + 3);
  } else if (src_.compare(p, 2, "%}") == 0) {
    *end = p + 2;
  } else {
    return false;
  }
  return true;
}

Status Lexer::LexComment(size_t* pos) {
  size_t close = src_.find("#}", *pos);
  if (close == std::string::npos) return Error(*pos, "Missing end of comment tag");
  char sign = 0;
  if (close > *pos && (src_[close - 1] == '-' || src_[close - 1] == '+')) sign = src_[close - 1];
  *pos = AfterCloser(close, sign);
  return OkStatus();
}

Status Lexer::LexRaw(size_t* pos) {
  size_t search = *pos;
  while (true) {
    size_t open = src_.find("{%", search);
    if (open == std::string::npos) return Error(*pos, "Missing end of raw directive");
    size_t p = open + 2;
    char sign = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
    p = SkipSpace(src_, p);
    if (src_.compare(p, 6, "endraw") == 0) {
      p = SkipSpace(src_, p + 6);
      char close_sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) close_sign = src_[p++];
      if (src_.compare(p, 2, "%}") == 0) {
        EmitText(*pos, open, sign, false);
        *pos = AfterCloser(p, close_sign);
        return OkStatus();
      }
    }
    search = open + 2;
  }
}

Status Lexer::LexString(size_t* pos) {
  char quote = src_[*pos];
  size_t p = *pos + 1;
  std::string out;
  while (true) {
    if (p >= src_.size()) return Error(*pos, "unexpected char " + std::string(1, quote));
    char c = src_[p];
    if (c == quote) break;
    if (c != '\\') {
      out += c;
      ++p;
      continue;
    }
    if (p + 1 >= src_.size()) return Error(*pos, "unexpected char " + std::string(1, quote));
    StatusOr<size_t> next = AppendEscape(src_, p + 1, &out);
    if (!next.ok()) return Error(*pos, next.status().message());
    p = *next;
  }
  Emit(TokenType::kString, std::move(out), *pos);
  *pos = p + 1;
  return OkStatus();
}

size_t Lexer::DigitsEnd(size_t q) const {
  size_t start = q;
  while (q < src_.size()) {
    // A digit, or a single '_' separating two digits.
    const bool separator =
        src_[q] == '_' && q > start && q + 1 < src_.size() && IsDigitChar(src_[q + 1]);
    if (!IsDigitChar(src_[q]) && !separator) break;
    ++q;
  }
  return q > start ? q : std::string::npos;
}

std::string Lexer::WithoutUnderscores(size_t begin, size_t end) const {
  std::string s;
  for (size_t i = begin; i < end; ++i) {
    if (src_[i] != '_') s += src_[i];
  }
  return s;
}

bool Lexer::LexFloat(size_t* pos) {
  size_t p = *pos;
  if (p > 0 && src_[p - 1] == '.') return false;  // "x.0.1" is not a float after the dot
  size_t q = DigitsEnd(p);
  if (q == std::string::npos) return false;
  bool is_float = false;
  if (q < src_.size() && src_[q] == '.') {
    if (size_t frac_end = DigitsEnd(q + 1); frac_end != std::string::npos) {
      q = frac_end;
      is_float = true;
    }
  }
  if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
    size_t r = q + 1;
    if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
    if (size_t exp_end = DigitsEnd(r); exp_end != std::string::npos) {
      q = exp_end;
      is_float = true;
    }
  }
  if (!is_float) return false;
  Emit(TokenType::kFloat, WithoutUnderscores(p, q), p);
  tokens_.back().float_value = std::strtod(tokens_.back().text.c_str(), nullptr);
  *pos = q;
  return true;
}

bool Lexer::LexNumber(size_t* pos, Status* error) {
  if (LexFloat(pos)) return true;
  // Integers: 0b / 0o / 0x prefixed, decimal, or a run of zeros (as jinja2's integer_re).
  size_t p = *pos;
  size_t q = p;
  int base = 10;
  if (src_[p] == '0' && p + 1 < src_.size() &&
      std::string_view("bBoOxX").find(src_[p + 1]) != std::string_view::npos) {
    char k = static_cast<char>(src_[p + 1] | 0x20);
    base = k == 'b' ? 2 : k == 'o' ? 8 : 16;
    auto ok = [&](char c) {
      c = static_cast<char>(c | 0x20);
      return base == 2   ? (c == '0' || c == '1')
             : base == 8 ? (c >= '0' && c <= '7')
                         : (IsDigitChar(c) || (c >= 'a' && c <= 'f'));
    };
    size_t r = p + 2;
    while (r < src_.size() &&
           (ok(src_[r]) || (src_[r] == '_' && r + 1 < src_.size() && ok(src_[r + 1])))) {
      ++r;
    }
    if (r > p + 2) q = r;
  }
  if (q == p) {
    base = 10;
    if (src_[p] == '0') {
      q = p + 1;
      while (q < src_.size() &&
             (src_[q] == '0' || (src_[q] == '_' && q + 1 < src_.size() && src_[q + 1] == '0'))) {
        ++q;
      }
    } else {
      q = DigitsEnd(p);
      if (q == std::string::npos) return false;
    }
  }
  std::string literal = WithoutUnderscores(base == 10 ? p : p + 2, q);
  errno = 0;
  int64_t v = std::strtoll(literal.c_str(), nullptr, base);
  if (errno == ERANGE) {
    *error = Error(p, "integer literal too large");
    return true;
  }
  Emit(TokenType::kInteger, src_.substr(p, q - p), p);
  tokens_.back().int_value = v;
  *pos = q;
  return true;
}

Status Lexer::LexTag(size_t* pos, TagKind kind) {
  std::vector<char> balance;
  size_t p = *pos;
  while (true) {
    p = SkipSpace(src_, p);
    if (p >= src_.size()) {
      *pos = p;
      return OkStatus();  // the parser reports the unexpected end of template
    }
    if (balance.empty()) {
      char sign = (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
      size_t closer = p + (sign ? 1 : 0);
      if (kind == TagKind::kBlock && src_.compare(closer, 2, "%}") == 0) {
        Emit(TokenType::kBlockEnd, "", p);
        *pos = AfterCloser(closer, sign);
        return OkStatus();
      }
      if (kind == TagKind::kVariable && sign != '+' && src_.compare(closer, 2, "}}") == 0) {
        Emit(TokenType::kVariableEnd, "", p);
        *pos = sign == '-' ? SkipSpace(src_, closer + 2) : closer + 2;
        line_starting_ = src_[*pos - 1] == '\n';
        return OkStatus();
      }
    }
    unsigned char c = static_cast<unsigned char>(src_[p]);
    if (IsDigitChar(static_cast<char>(c))) {
      Status error;
      if (LexNumber(&p, &error)) {
        ASTR_RETURN_IF_ERROR(error);
        continue;
      }
    }
    if (IsIdentStart(c)) {
      size_t q = p;
      while (q < src_.size() && IsIdentChar(static_cast<unsigned char>(src_[q]))) ++q;
      Emit(TokenType::kName, src_.substr(p, q - p), p);
      p = q;
      continue;
    }
    if (c == '\'' || c == '"') {
      ASTR_RETURN_IF_ERROR(LexString(&p));
      continue;
    }
    bool matched = false;
    for (const char* op : kOperators) {
      size_t len = std::char_traits<char>::length(op);
      if (src_.compare(p, len, op) != 0) continue;
      std::string o(op);
      if (o == "{" || o == "(" || o == "[") {
        balance.push_back(o == "{" ? '}' : o == "(" ? ')' : ']');
      } else if (o == "}" || o == ")" || o == "]") {
        if (balance.empty()) return Error(p, "unexpected '" + o + "'");
        char expected = balance.back();
        balance.pop_back();
        if (expected != o[0]) {
          return Error(p, "unexpected '" + o + "', expected '" + std::string(1, expected) + "'");
        }
      }
      Emit(TokenType::kOperator, o, p);
      p += len;
      matched = true;
      break;
    }
    if (!matched) {
      size_t len = 1;
      text::DecodeAt(src_, p, &len);
      return Error(p, "unexpected char '" + src_.substr(p, len) + "' at " + std::to_string(p));
    }
  }
}

StatusOr<std::vector<Token>> Lexer::Run() {
  size_t pos = 0;
  while (pos < src_.size()) {
    size_t p = pos;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
        break;
      }
      ++p;
    }
    if (p == std::string::npos) {
      Emit(TokenType::kData, src_.substr(pos), pos);
      break;
    }
    char opener = src_[p + 1];
    char sign =
        (p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+')) ? src_[p + 2] : 0;
    size_t raw_end = 0;
    if (opener == '%' && MatchRawBegin(p, &raw_end)) {
      EmitText(pos, p, sign, false);
      line_starting_ = src_[raw_end - 1] == '\n';
      pos = raw_end;
      ASTR_RETURN_IF_ERROR(LexRaw(&pos));
      continue;
    }
    EmitText(pos, p, sign, opener == '{');
    line_starting_ = false;
    pos = p + 2 + (sign ? 1 : 0);
    if (opener == '#') {
      ASTR_RETURN_IF_ERROR(LexComment(&pos));
      continue;
    }
    Emit(opener == '{' ? TokenType::kVariableBegin : TokenType::kBlockBegin, "", p);
    ASTR_RETURN_IF_ERROR(LexTag(&pos, opener == '{' ? TagKind::kVariable : TagKind::kBlock));
  }
  Emit(TokenType::kEof, "", src_.size());
  return std::move(tokens_);
}

// jinja2 drops one trailing newline and reads \r\n and \r as \n.
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options) {
  Lexer lexer(NormalizeNewlines(source), options);
  return lexer.Run();
}

std::string DescribeToken(const Token& token) {
  switch (token.type) {
    case TokenType::kName:
    case TokenType::kOperator:
      return token.text;
    case TokenType::kData:
      return "template data / text";
    case TokenType::kVariableBegin:
      return "begin of print statement";
    case TokenType::kVariableEnd:
      return "end of print statement";
    case TokenType::kBlockBegin:
      return "begin of statement block";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kString:
      return "string";
    case TokenType::kInteger:
      return "integer";
    case TokenType::kFloat:
      return "float";
    case TokenType::kEof:
      return "end of template";
  }
  return "token";
}

}  // namespace astr::jinja
