#include "chat/parser.h"

#include <algorithm>
#include <initializer_list>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/builtins.h"

namespace hearth::chat {
namespace {

// Deeper expressions or block nesting than this are refused: evaluation
// recurses once per level, and no real template comes close.
constexpr int kMaxExprDepth = 200;
constexpr int kMaxNesting = 100;
// The variable a filter block's body is captured into; not an identifier.
constexpr const char* kFilterBody = "(filter block)";

using T = TokenType;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  absl::StatusOr<Body> parse_all() {
    std::string end;
    HEARTH_ASSIGN_OR_RETURN(Body body, parse_body({}, end));
    return body;
  }

 private:
  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(i_ + n, toks_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().type == T::kOperator && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == T::kName && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }

  absl::Status error(const Token& t, std::string_view msg) const {
    return absl::InvalidArgumentError(
        str_cat("template syntax error at ", t.pos.line, ":", t.pos.col, ": ", msg));
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::kEof:
        return "end of template";
      case T::kBlockEnd:
        return "'%}'";
      case T::kVarEnd:
        return "'}}'";
      case T::kString:
        return "a string";
      default:
        return str_cat("'", t.text, "'");
    }
  }
  absl::Status expect_op(std::string_view op) {
    if (skip_op(op)) return absl::OkStatus();
    return error(cur(), str_cat("expected '", op, "', got ", describe(cur())));
  }
  absl::Status expect(T type, std::string_view what) {
    if (cur().type != type)
      return error(cur(), str_cat("expected ", what, ", got ", describe(cur())));
    advance();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> expect_name() {
    if (cur().type != T::kName)
      return error(cur(), str_cat("expected a name, got ", describe(cur())));
    std::string n = cur().text;
    advance();
    return n;
  }

  // ---- statements ----

  // Parses until `{% <one of ends>`; leaves the position after that name.
  absl::StatusOr<Body> parse_body(std::initializer_list<std::string_view> ends,
                                  std::string& found) {
    if (++nesting_ > kMaxNesting) return error(cur(), "blocks nested too deeply");
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == T::kEof) {
        --nesting_;
        if (ends.size() == 0) return body;
        return error(t, str_cat("unexpected end of template, expected '", *ends.begin(), "'"));
      }
      if (t.type == T::kText) {
        auto s = std::make_unique<Stmt>(Stmt::Kind::kText, t.pos);
        s->text = t.text;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == T::kVarBegin) {
        HEARTH_ASSIGN_OR_RETURN(StmtPtr s, parse_output());
        body.push_back(std::move(s));
      } else if (t.type == T::kBlockBegin) {
        const Token& name = peek();
        if (name.type == T::kName && std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
          found = name.text;
          advance(), advance();
          --nesting_;
          return body;
        }
        advance();
        HEARTH_ASSIGN_OR_RETURN(StmtPtr s, parse_statement());
        body.push_back(std::move(s));
      } else {
        return error(t, str_cat("unexpected ", describe(t)));
      }
    }
  }

  absl::StatusOr<StmtPtr> parse_output() {
    const Pos pos = cur().pos;
    advance();
    auto s = std::make_unique<Stmt>(Stmt::Kind::kOutput, pos);
    HEARTH_ASSIGN_OR_RETURN(s->expr, parse_tuple(true, false, {}));
    HEARTH_RETURN_IF_ERROR(expect(T::kVarEnd, "'}}'"));
    return s;
  }

  absl::StatusOr<StmtPtr> parse_statement() {
    const Token& t = cur();
    if (t.type != T::kName) return error(t, "expected a tag name");
    const std::string name = t.text;
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "filter") return parse_filter_block();
    if (name == "generation") return parse_generation();
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return error(t, str_cat("'", name, "' outside of a loop"));
      auto s = std::make_unique<Stmt>(name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue,
                                      t.pos);
      advance();
      HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
      return s;
    }
    return error(t, str_cat("unsupported tag '", name, "'"));
  }

  absl::StatusOr<StmtPtr> parse_if() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::kIf, cur().pos);
    advance();
    while (true) {
      HEARTH_ASSIGN_OR_RETURN(ExprPtr cond, parse_tuple(false, false, {}));
      HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
      std::string end;
      HEARTH_ASSIGN_OR_RETURN(Body body, parse_body({"elif", "else", "endif"}, end));
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
        HEARTH_ASSIGN_OR_RETURN(Body else_body, parse_body({"endif"}, end));
        s->branches.emplace_back(nullptr, std::move(else_body));
      }
      HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
      return s;
    }
  }

  // name, or name, name, ... (optionally parenthesised).
  absl::StatusOr<std::vector<std::string>> parse_targets() {
    const bool paren = skip_op("(");
    std::vector<std::string> names;
    do {
      if (paren && is_op(")")) break;
      HEARTH_ASSIGN_OR_RETURN(std::string n, expect_name());
      names.push_back(std::move(n));
    } while (skip_op(","));
    if (paren) HEARTH_RETURN_IF_ERROR(expect_op(")"));
    return names;
  }

  absl::StatusOr<StmtPtr> parse_for() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::kFor, cur().pos);
    advance();
    HEARTH_ASSIGN_OR_RETURN(s->targets, parse_targets());
    if (!skip_name("in")) return error(cur(), "expected 'in' in for loop");
    HEARTH_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, false, {"recursive", "if"}));
    if (skip_name("if")) {
      HEARTH_ASSIGN_OR_RETURN(s->filter, parse_expression(true));
    }
    if (is_name("recursive")) return error(cur(), "recursive loops are not supported");
    HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
    std::string end;
    ++loop_depth_;
    HEARTH_ASSIGN_OR_RETURN(s->body, parse_body({"else", "endfor"}, end));
    --loop_depth_;
    if (end == "else") {
      HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
      HEARTH_ASSIGN_OR_RETURN(s->else_body, parse_body({"endfor"}, end));
    }
    HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
    return s;
  }

  absl::StatusOr<StmtPtr> parse_set() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::kSet, cur().pos);
    advance();
    if (cur().type == T::kName && peek().type == T::kOperator && peek().text == ".") {
      s->targets.push_back(cur().text);
      advance(), advance();
      HEARTH_ASSIGN_OR_RETURN(s->attr, expect_name());
    } else {
      HEARTH_ASSIGN_OR_RETURN(s->targets, parse_targets());
    }
    if (skip_op("=")) {
      HEARTH_ASSIGN_OR_RETURN(s->expr, parse_tuple(true, false, {}));
      HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
      return s;
    }
    if (!s->attr.empty() || s->targets.size() != 1)
      return error(cur(), "a block set assigns exactly one name");
    if (is_op("|")) return error(cur(), "filtered block set is not supported");
    HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}' or '='"));
    s->kind = Stmt::Kind::kSetBlock;
    std::string end;
    HEARTH_ASSIGN_OR_RETURN(s->body, parse_body({"endset"}, end));
    HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
    return s;
  }

  // {% filter f(args)|g %}body{% endfilter %}: the body's text, filtered.
  // Stored as a set-block of a name no template can spell, followed by an
  // output of the filter chain applied to that name.
  absl::StatusOr<StmtPtr> parse_filter_block() {
    const Pos pos = cur().pos;
    advance();
    auto e = std::make_unique<Expr>(Expr::Kind::kName, pos);
    e->name = kFilterBody;
    const Token name_tok = cur();
    HEARTH_ASSIGN_OR_RETURN(std::string name, expect_name());
    if (find_filter(name) == nullptr)
      return error(name_tok, str_cat("unknown filter '", name, "'"));
    auto first = std::make_unique<Expr>(Expr::Kind::kFilter, name_tok.pos);
    first->name = std::move(name);
    first->children.push_back(std::move(e));
    if (is_op("(")) HEARTH_RETURN_IF_ERROR(parse_args(*first));
    HEARTH_ASSIGN_OR_RETURN(ExprPtr chain, finish(std::move(first)));
    while (is_op("|")) {
      HEARTH_ASSIGN_OR_RETURN(chain, parse_filter(std::move(chain)));
    }
    HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
    auto capture = std::make_unique<Stmt>(Stmt::Kind::kSetBlock, pos);
    capture->targets.push_back(kFilterBody);
    std::string end;
    HEARTH_ASSIGN_OR_RETURN(capture->body, parse_body({"endfilter"}, end));
    HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
    auto output = std::make_unique<Stmt>(Stmt::Kind::kOutput, pos);
    output->expr = std::move(chain);
    // An if-branch without condition: a block that runs its body once.
    auto block = std::make_unique<Stmt>(Stmt::Kind::kIf, pos);
    Body body;
    body.push_back(std::move(capture));
    body.push_back(std::move(output));
    block->branches.emplace_back(nullptr, std::move(body));
    return block;
  }

  // {% generation %}...{% endgeneration %} (Hugging Face's AssistantTracker
  // marks the assistant's tokens with it): renders its body unchanged.
  absl::StatusOr<StmtPtr> parse_generation() {
    auto block = std::make_unique<Stmt>(Stmt::Kind::kIf, cur().pos);
    advance();
    HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
    std::string end;
    HEARTH_ASSIGN_OR_RETURN(Body body, parse_body({"endgeneration"}, end));
    HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
    block->branches.emplace_back(nullptr, std::move(body));
    return block;
  }

  absl::StatusOr<StmtPtr> parse_macro() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::kMacro, cur().pos);
    advance();
    HEARTH_ASSIGN_OR_RETURN(s->name, expect_name());
    HEARTH_RETURN_IF_ERROR(expect_op("("));
    while (!is_op(")")) {
      if (!s->params.empty()) HEARTH_RETURN_IF_ERROR(expect_op(","));
      if (is_op(")")) break;
      HEARTH_ASSIGN_OR_RETURN(std::string p, expect_name());
      s->params.push_back(std::move(p));
      ExprPtr def;
      if (skip_op("=")) {
        HEARTH_ASSIGN_OR_RETURN(def, parse_expression(true));
      }
      s->defaults.push_back(std::move(def));
    }
    advance();
    HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    HEARTH_ASSIGN_OR_RETURN(s->body, parse_body({"endmacro"}, end));
    loop_depth_ = saved_loops;
    if (cur().type == T::kName && cur().text == s->name) advance();
    HEARTH_RETURN_IF_ERROR(expect(T::kBlockEnd, "'%}'"));
    return s;
  }

  // ---- expressions ----

  absl::StatusOr<ExprPtr> node(Expr::Kind kind, Pos pos, std::vector<ExprPtr> children,
                               std::string name = {}) {
    auto e = std::make_unique<Expr>(kind, pos);
    e->name = std::move(name);
    e->children = std::move(children);
    return finish(std::move(e));
  }
  absl::StatusOr<ExprPtr> finish(ExprPtr e) {
    int d = 0;
    for (const auto& c : e->children)
      if (c) d = std::max(d, c->depth);
    for (const auto& kv : e->kwargs) d = std::max(d, kv.second->depth);
    e->depth = d + 1;
    if (e->depth > kMaxExprDepth) return error_at(e->pos, "expression nested too deeply");
    return e;
  }
  absl::Status error_at(Pos p, std::string_view msg) const {
    return absl::InvalidArgumentError(
        str_cat("template syntax error at ", p.line, ":", p.col, ": ", msg));
  }
  static std::vector<ExprPtr> two(ExprPtr a, ExprPtr b) {
    std::vector<ExprPtr> v;
    v.push_back(std::move(a));
    v.push_back(std::move(b));
    return v;
  }
  static std::vector<ExprPtr> one(ExprPtr a) {
    std::vector<ExprPtr> v;
    v.push_back(std::move(a));
    return v;
  }

  // Guards recursion on the C++ stack ("((((((..." in a fuzzed template).
  struct DepthGuard {
    int& d;
    explicit DepthGuard(int& depth) : d(depth) { ++d; }
    ~DepthGuard() { --d; }
  };

  absl::StatusOr<ExprPtr> parse_expression(bool with_condexpr) {
    DepthGuard g(recursion_);
    if (recursion_ > kMaxExprDepth) return error(cur(), "expression nested too deeply");
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  absl::StatusOr<ExprPtr> parse_condexpr() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_or());
    while (is_name("if")) {
      const Pos pos = cur().pos;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr cond, parse_or());
      ExprPtr other;
      if (skip_name("else")) {
        HEARTH_ASSIGN_OR_RETURN(other, parse_condexpr());
      }
      std::vector<ExprPtr> c = two(std::move(e), std::move(cond));
      c.push_back(std::move(other));
      HEARTH_ASSIGN_OR_RETURN(e, node(Expr::Kind::kCond, pos, std::move(c)));
    }
    return e;
  }

  absl::StatusOr<ExprPtr> parse_or() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_and());
    while (is_name("or")) {
      const Pos pos = cur().pos;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr r, parse_and());
      HEARTH_ASSIGN_OR_RETURN(e, node(Expr::Kind::kOr, pos, two(std::move(e), std::move(r))));
    }
    return e;
  }

  absl::StatusOr<ExprPtr> parse_and() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_not());
    while (is_name("and")) {
      const Pos pos = cur().pos;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr r, parse_not());
      HEARTH_ASSIGN_OR_RETURN(e, node(Expr::Kind::kAnd, pos, two(std::move(e), std::move(r))));
    }
    return e;
  }

  absl::StatusOr<ExprPtr> parse_not() {
    if (is_name("not")) {
      DepthGuard g(recursion_);
      if (recursion_ > kMaxExprDepth) return error(cur(), "expression nested too deeply");
      const Pos pos = cur().pos;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_not());
      return node(Expr::Kind::kNot, pos, one(std::move(e)));
    }
    return parse_compare();
  }

  absl::StatusOr<ExprPtr> parse_compare() {
    const Pos pos = cur().pos;
    HEARTH_ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
    std::vector<ExprPtr> operands;
    std::vector<std::string> ops;
    operands.push_back(std::move(first));
    while (true) {
      std::string op;
      if (cur().type == T::kOperator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && peek().type == T::kName && peek().text == "in") {
        advance(), advance();
        op = "not in";
      } else {
        break;
      }
      HEARTH_ASSIGN_OR_RETURN(ExprPtr r, parse_math1());
      operands.push_back(std::move(r));
      ops.push_back(std::move(op));
    }
    if (ops.empty()) return std::move(operands[0]);
    HEARTH_ASSIGN_OR_RETURN(ExprPtr e, node(Expr::Kind::kCompare, pos, std::move(operands)));
    e->ops = std::move(ops);
    return e;
  }

  // One left-associative level of binary operators.
  template <typename Next>
  absl::StatusOr<ExprPtr> parse_binary(std::initializer_list<std::string_view> ops, Next next) {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr e, (this->*next)());
    while (cur().type == T::kOperator &&
           std::find(ops.begin(), ops.end(), cur().text) != ops.end()) {
      const Pos pos = cur().pos;
      std::string op = cur().text;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr r, (this->*next)());
      HEARTH_ASSIGN_OR_RETURN(
          e, node(Expr::Kind::kBinary, pos, two(std::move(e), std::move(r)), std::move(op)));
    }
    return e;
  }
  absl::StatusOr<ExprPtr> parse_math1() { return parse_binary({"+", "-"}, &Parser::parse_concat); }
  absl::StatusOr<ExprPtr> parse_concat() { return parse_binary({"~"}, &Parser::parse_math2); }
  absl::StatusOr<ExprPtr> parse_math2() {
    return parse_binary({"*", "/", "//", "%"}, &Parser::parse_pow);
  }
  absl::StatusOr<ExprPtr> parse_pow() { return parse_binary({"**"}, &Parser::parse_unary_f); }
  absl::StatusOr<ExprPtr> parse_unary_f() { return parse_unary(true); }

  absl::StatusOr<ExprPtr> parse_unary(bool with_filter) {
    DepthGuard g(recursion_);
    if (recursion_ > kMaxExprDepth) return error(cur(), "expression nested too deeply");
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Pos pos = cur().pos;
      std::string op = cur().text;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
      HEARTH_ASSIGN_OR_RETURN(e, node(Expr::Kind::kUnary, pos, one(std::move(operand)), op));
    } else {
      HEARTH_ASSIGN_OR_RETURN(e, parse_primary());
    }
    HEARTH_ASSIGN_OR_RETURN(e, parse_postfix(std::move(e)));
    if (with_filter) {
      HEARTH_ASSIGN_OR_RETURN(e, parse_filter_expr(std::move(e)));
    }
    return e;
  }

  absl::StatusOr<ExprPtr> literal(Value v, Pos pos) {
    auto e = std::make_unique<Expr>(Expr::Kind::kLiteral, pos);
    e->literal = std::move(v);
    return e;
  }

  absl::StatusOr<ExprPtr> parse_primary() {
    const Token& t = cur();
    const Pos pos = t.pos;
    switch (t.type) {
      case T::kName: {
        const std::string n = t.text;
        advance();
        if (n == "true" || n == "True") return literal(Value::boolean(true), pos);
        if (n == "false" || n == "False") return literal(Value::boolean(false), pos);
        if (n == "none" || n == "None") return literal(Value::none(), pos);
        auto e = std::make_unique<Expr>(Expr::Kind::kName, pos);
        e->name = n;
        return e;
      }
      case T::kString: {
        std::string s;
        while (cur().type == T::kString) s += cur().text, advance();
        return literal(Value::string(std::move(s)), pos);
      }
      case T::kInt: {
        const int64_t v = t.int_value;
        advance();
        return literal(Value::integer(v), pos);
      }
      case T::kFloat: {
        const double v = t.float_value;
        advance();
        return literal(Value::floating(v), pos);
      }
      case T::kOperator:
        if (t.text == "(") {
          advance();
          HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_tuple(true, true, {}));
          HEARTH_RETURN_IF_ERROR(expect_op(")"));
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    return error(t, str_cat("unexpected ", describe(t)));
  }

  bool tuple_end(std::initializer_list<std::string_view> extra_end) const {
    const Token& t = cur();
    if (t.type == T::kVarEnd || t.type == T::kBlockEnd || t.type == T::kEof) return true;
    if (t.type == T::kOperator && t.text == ")") return true;
    return t.type == T::kName &&
           std::find(extra_end.begin(), extra_end.end(), t.text) != extra_end.end();
  }

  // An expression, or a tuple of them separated by commas (jinja2's parse_tuple).
  absl::StatusOr<ExprPtr> parse_tuple(bool with_condexpr, bool explicit_parens,
                                      std::initializer_list<std::string_view> extra_end) {
    const Pos pos = cur().pos;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) HEARTH_RETURN_IF_ERROR(expect_op(","));
      if (tuple_end(extra_end)) break;
      HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(with_condexpr));
      items.push_back(std::move(e));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens)
        return error(cur(), str_cat("expected an expression, got ", describe(cur())));
    }
    return node(Expr::Kind::kTuple, pos, std::move(items));
  }

  absl::StatusOr<ExprPtr> parse_list() {
    const Pos pos = cur().pos;
    advance();
    std::vector<ExprPtr> items;
    while (!is_op("]")) {
      if (!items.empty()) HEARTH_RETURN_IF_ERROR(expect_op(","));
      if (is_op("]")) break;
      HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(true));
      items.push_back(std::move(e));
    }
    advance();
    return node(Expr::Kind::kList, pos, std::move(items));
  }

  absl::StatusOr<ExprPtr> parse_dict() {
    const Pos pos = cur().pos;
    advance();
    std::vector<ExprPtr> items;
    while (!is_op("}")) {
      if (!items.empty()) HEARTH_RETURN_IF_ERROR(expect_op(","));
      if (is_op("}")) break;
      HEARTH_ASSIGN_OR_RETURN(ExprPtr k, parse_expression(true));
      HEARTH_RETURN_IF_ERROR(expect_op(":"));
      HEARTH_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
      items.push_back(std::move(k));
      items.push_back(std::move(v));
    }
    advance();
    return node(Expr::Kind::kDict, pos, std::move(items));
  }

  absl::StatusOr<ExprPtr> parse_postfix(ExprPtr e) {
    while (true) {
      const Pos pos = cur().pos;
      if (skip_op(".")) {
        if (cur().type == T::kInt) {
          HEARTH_ASSIGN_OR_RETURN(ExprPtr idx, literal(Value::integer(cur().int_value), cur().pos));
          advance();
          HEARTH_ASSIGN_OR_RETURN(e,
                                  node(Expr::Kind::kItem, pos, two(std::move(e), std::move(idx))));
          continue;
        }
        HEARTH_ASSIGN_OR_RETURN(std::string attr, expect_name());
        HEARTH_ASSIGN_OR_RETURN(e,
                                node(Expr::Kind::kAttr, pos, one(std::move(e)), std::move(attr)));
      } else if (is_op("[")) {
        advance();
        HEARTH_ASSIGN_OR_RETURN(e, parse_subscript(std::move(e), pos));
      } else if (is_op("(")) {
        HEARTH_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  absl::StatusOr<ExprPtr> parse_subscript(ExprPtr obj, Pos pos) {
    ExprPtr start;
    if (!is_op(":")) {
      HEARTH_ASSIGN_OR_RETURN(start, parse_expression(true));
    }
    if (!skip_op(":")) {
      HEARTH_RETURN_IF_ERROR(expect_op("]"));
      return node(Expr::Kind::kItem, pos, two(std::move(obj), std::move(start)));
    }
    ExprPtr stop, step;
    if (!is_op("]") && !is_op(":")) {
      HEARTH_ASSIGN_OR_RETURN(stop, parse_expression(true));
    }
    if (skip_op(":") && !is_op("]")) {
      HEARTH_ASSIGN_OR_RETURN(step, parse_expression(true));
    }
    HEARTH_RETURN_IF_ERROR(expect_op("]"));
    std::vector<ExprPtr> c = two(std::move(obj), std::move(start));
    c.push_back(std::move(stop));
    c.push_back(std::move(step));
    return node(Expr::Kind::kSlice, pos, std::move(c));
  }

  // ( args ) appended to `e`'s children and kwargs.
  absl::Status parse_args(Expr& e) {
    HEARTH_RETURN_IF_ERROR(expect_op("("));
    bool first = true;
    while (!is_op(")")) {
      if (!first) HEARTH_RETURN_IF_ERROR(expect_op(","));
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) return error(cur(), "*args and **kwargs are not supported");
      if (cur().type == T::kName && peek().type == T::kOperator && peek().text == "=") {
        std::string key = cur().text;
        advance(), advance();
        HEARTH_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
        e.kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        if (!e.kwargs.empty()) return error(cur(), "positional argument after keyword argument");
        HEARTH_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
        e.children.push_back(std::move(v));
      }
    }
    advance();
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> parse_call(ExprPtr callee) {
    auto e = std::make_unique<Expr>(Expr::Kind::kCall, cur().pos);
    e->children.push_back(std::move(callee));
    HEARTH_RETURN_IF_ERROR(parse_args(*e));
    return finish(std::move(e));
  }

  absl::StatusOr<ExprPtr> parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        HEARTH_ASSIGN_OR_RETURN(e, parse_filter(std::move(e)));
      } else if (is_name("is")) {
        HEARTH_ASSIGN_OR_RETURN(e, parse_test(std::move(e)));
      } else if (is_op("(")) {
        HEARTH_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  absl::StatusOr<ExprPtr> parse_filter(ExprPtr operand) {
    advance();
    const Token name_tok = cur();
    HEARTH_ASSIGN_OR_RETURN(std::string name, expect_name());
    if (find_filter(name) == nullptr)
      return error(name_tok, str_cat("unknown filter '", name, "'"));
    auto e = std::make_unique<Expr>(Expr::Kind::kFilter, name_tok.pos);
    e->name = std::move(name);
    e->children.push_back(std::move(operand));
    if (is_op("(")) HEARTH_RETURN_IF_ERROR(parse_args(*e));
    return finish(std::move(e));
  }

  absl::StatusOr<ExprPtr> parse_test(ExprPtr operand) {
    const Pos pos = cur().pos;
    advance();
    const bool negated = skip_name("not");
    const Token name_tok = cur();
    HEARTH_ASSIGN_OR_RETURN(std::string name, expect_name());
    if (find_test(name) == nullptr) return error(name_tok, str_cat("unknown test '", name, "'"));
    auto e = std::make_unique<Expr>(Expr::Kind::kTest, name_tok.pos);
    e->name = std::move(name);
    e->children.push_back(std::move(operand));
    const Token& t = cur();
    const bool arg_start = t.type == T::kName || t.type == T::kString || t.type == T::kInt ||
                           t.type == T::kFloat ||
                           (t.type == T::kOperator && (t.text == "[" || t.text == "{"));
    if (is_op("(")) {
      HEARTH_RETURN_IF_ERROR(parse_args(*e));
    } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) return error(t, "cannot chain multiple tests with 'is'");
      HEARTH_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
      HEARTH_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
      e->children.push_back(std::move(arg));
    }
    HEARTH_ASSIGN_OR_RETURN(e, finish(std::move(e)));
    if (negated) return node(Expr::Kind::kNot, pos, one(std::move(e)));
    return e;
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int nesting_ = 0;
  int loop_depth_ = 0;
  int recursion_ = 0;
};

}  // namespace

absl::StatusOr<Body> parse_template(std::string_view source) {
  HEARTH_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source));
  return Parser(std::move(tokens)).parse_all();
}

}  // namespace hearth::chat
