// `${...}` substitution for network files: variable lookup and a small integer expression
// evaluator (enough for bottleneck widths like `${filters*4}`).
#include "net/variables.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>

namespace cnnscale::net {

namespace {

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Parses a decimal integer that fills the whole string ("-3", "64"); false otherwise.
bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size()) return false;
  int64_t v = 0;
  for (; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[i] - '0', &v)) return false;
  }
  out = s[0] == '-' ? -v : v;
  return true;
}

// Recursive-descent evaluator over one `${...}` body.
class Evaluator {
 public:
  Evaluator(const std::string& expr, const VarScope& scope, const ConfigNode& where)
      : s_(expr), scope_(scope), where_(where) {}

  int64_t run() {
    int64_t v = sum();
    skip_space();
    if (pos_ != s_.size()) error(fmt::format("unexpected '{}'", s_.substr(pos_)));
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    where_.fail(fmt::format("in '${{{}}}': {}", s_, what));
  }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool accept(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  // a op b with overflow detection; `op` is one of + - *.
  int64_t apply(char op, int64_t a, int64_t b) const {
    int64_t r = 0;
    bool overflow = op == '+'   ? __builtin_add_overflow(a, b, &r)
                    : op == '-' ? __builtin_sub_overflow(a, b, &r)
                                : __builtin_mul_overflow(a, b, &r);
    if (overflow) error("integer overflow");
    return r;
  }
  int64_t sum() {
    int64_t v = product();
    for (;;) {
      if (accept('+')) {
        v = apply('+', v, product());
      } else if (accept('-')) {
        v = apply('-', v, product());
      } else {
        return v;
      }
    }
  }
  int64_t product() {
    int64_t v = factor();
    for (;;) {
      if (accept('*')) {
        v = apply('*', v, factor());
      } else if (accept('/') || accept('%')) {
        bool divide = s_[pos_ - 1] == '/';
        int64_t d = factor();
        if (d == 0) error("division by zero");
        // The one quotient of two int64 that does not fit (and traps on x86, % as well).
        if (v == INT64_MIN && d == -1) error("integer overflow");
        v = divide ? v / d : v % d;
      } else {
        return v;
      }
    }
  }
  int64_t factor() {
    skip_space();
    if (accept('(')) {
      int64_t v = sum();
      if (!accept(')')) error("missing ')'");
      return v;
    }
    if (accept('-')) return apply('-', 0, factor());  // -INT64_MIN does not fit
    if (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      size_t begin = pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      int64_t v = 0;
      if (!parse_int(s_.substr(begin, pos_ - begin), v)) error("integer literal out of range");
      return v;
    }
    if (pos_ < s_.size() && is_ident_start(s_[pos_])) {
      size_t begin = pos_;
      while (pos_ < s_.size() && is_ident_char(s_[pos_])) ++pos_;
      std::string name = s_.substr(begin, pos_ - begin);
      const std::string* value = scope_.find(name);
      if (!value) error(fmt::format("unknown variable '{}' (known: {})", name, scope_.names()));
      int64_t v = 0;
      if (!parse_int(*value, v)) error(fmt::format("variable '{}' = '{}' is not an integer", name, *value));
      return v;
    }
    error(pos_ < s_.size() ? fmt::format("unexpected '{}'", s_.substr(pos_)) : "expression ends early");
  }

  const std::string& s_;
  const VarScope& scope_;
  const ConfigNode& where_;
  size_t pos_ = 0;
};

// Characters a `${...}` body may contain: names, integers, operators, parentheses, spaces.
constexpr const char* kExpressionChars =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+-*/%() \t";

bool is_plain_identifier(const std::string& s) {
  if (s.empty() || !is_ident_start(s[0])) return false;
  for (char c : s)
    if (!is_ident_char(c)) return false;
  return true;
}

}  // namespace

std::string VarScope::names() const {
  std::string out;
  for (const auto& kv : values_) out += (out.empty() ? "" : ", ") + kv.first;
  return out;
}

std::string protect_references(const std::string& text) {
  std::string out = text;
  for (size_t open = out.find("${"); open != std::string::npos; open = out.find("${", open + 2)) {
    // Only a body of expression characters closed by '}' is a reference; anything else (say
    // `"${classes"}`) is left alone and reported by substitution with its location.
    size_t close = out.find_first_not_of(kExpressionChars, open + 2);
    if (close == std::string::npos || out[close] != '}') continue;
    out[open + 1] = '(';
    out[close] = ')';
  }
  return out;
}

bool has_reference(const std::string& text) {
  return text.find("${") != std::string::npos || text.find("$(") != std::string::npos;
}

std::string substitute(const std::string& text, const VarScope& scope, const ConfigNode& where) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    size_t open = std::min(text.find("${", pos), text.find("$(", pos));
    if (open == std::string::npos) break;
    // `${...}` ends at the first '}'; a protected `$(...)` at its matching ')', since the
    // expression may hold parentheses of its own.
    size_t close = std::string::npos;
    if (text[open + 1] == '{') {
      close = text.find('}', open + 2);
    } else {
      int depth = 1;
      for (size_t i = open + 2; i < text.size() && close == std::string::npos; ++i) {
        depth += text[i] == '(' ? 1 : text[i] == ')' ? -1 : 0;
        if (depth == 0) close = i;
      }
    }
    if (close == std::string::npos) where.fail(fmt::format("unterminated '${{' in '{}'", text));
    out += text.substr(pos, open - pos);
    std::string body = text.substr(open + 2, close - open - 2);
    // Trim so `${ filters }` works like `${filters}`.
    size_t b = body.find_first_not_of(" \t"), e = body.find_last_not_of(" \t");
    body = b == std::string::npos ? "" : body.substr(b, e - b + 1);
    if (is_plain_identifier(body)) {
      // A bare name substitutes its text, which need not be an integer (blob names, floats).
      const std::string* value = scope.find(body);
      if (!value) where.fail(fmt::format("unknown variable '{}' (known: {})", body, scope.names()));
      out += *value;
    } else {
      out += std::to_string(Evaluator(body, scope, where).run());
    }
    pos = close + 1;
  }
  return out + text.substr(pos);
}

void set_scalar(const ConfigNode& node, const std::string& text) {
  YAML::Node handle = node.yaml();  // shares the node; std::string assignment keeps its mark
  handle = text;
}

void substitute_in_place(const ConfigNode& node, const VarScope& scope) {
  if (node.is_scalar()) {
    const std::string& text = node.yaml().Scalar();
    if (has_reference(text)) set_scalar(node, substitute(text, scope, node));
  } else if (node.is_sequence()) {
    for (const auto& item : node.items()) substitute_in_place(item, scope);
  } else if (node.is_map()) {
    for (const auto& key : node.keys()) substitute_in_place(node[key], scope);
  }
}

}  // namespace cnnscale::net
