// Expression evaluation of the Evaluator (statements are in evaluator.cc).
#include <optional>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/builtins.h"
#include "chat/evaluator.h"
#include "chat/operators.h"
#include "chat/utf8.h"

namespace hearth::chat {

absl::Status Evaluator::enter() {
  if (++eval_depth_ > limits_.max_eval_depth) {
    --eval_depth_;
    return absl::ResourceExhaustedError(
        str_cat("template evaluation nested deeper than ", limits_.max_eval_depth));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Evaluator::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  HEARTH_RETURN_IF_ERROR(charge(1));
  HEARTH_RETURN_IF_ERROR(enter());
  auto v = eval_node(e, scope);
  leave();
  return v;
}

absl::StatusOr<Value> Evaluator::eval_node(const Expr& e, const std::shared_ptr<Scope>& scope) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName:
      return eval_name(e, *scope);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple:
    case Expr::Kind::kDict:
      return eval_collection(e, scope);
    case Expr::Kind::kAttr: {
      HEARTH_ASSIGN_OR_RETURN(Value obj, eval(*e.children[0], scope));
      auto v = getattr(obj, e.name);
      if (!v.ok()) return locate(v.status(), e.pos, str_cat("attribute '", e.name, "'"));
      return v;
    }
    case Expr::Kind::kItem: {
      HEARTH_ASSIGN_OR_RETURN(Value obj, eval(*e.children[0], scope));
      HEARTH_ASSIGN_OR_RETURN(Value key, eval(*e.children[1], scope));
      auto v = getitem(obj, key);
      if (!v.ok()) return locate(v.status(), e.pos, "subscript");
      return v;
    }
    case Expr::Kind::kSlice:
      return eval_slice(e, scope);
    case Expr::Kind::kCall:
      return eval_call(e, scope);
    case Expr::Kind::kFilter:
      return eval_filter(e, scope);
    case Expr::Kind::kTest:
      return eval_test(e, scope);
    case Expr::Kind::kUnary: {
      HEARTH_ASSIGN_OR_RETURN(Value a, eval(*e.children[0], scope));
      auto v = unary_op(e.name, a);
      if (!v.ok()) return locate(v.status(), e.pos, str_cat("unary '", e.name, "'"));
      return v;
    }
    case Expr::Kind::kBinary: {
      HEARTH_ASSIGN_OR_RETURN(Value a, eval(*e.children[0], scope));
      HEARTH_ASSIGN_OR_RETURN(Value b, eval(*e.children[1], scope));
      auto v = binary_op(*this, e.name, a, b);
      if (!v.ok()) return locate(v.status(), e.pos, str_cat("operator '", e.name, "'"));
      return v;
    }
    case Expr::Kind::kCompare:
      return eval_compare(e, scope);
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr: {
      // Python's and/or return an operand, not a bool.
      HEARTH_ASSIGN_OR_RETURN(Value a, eval(*e.children[0], scope));
      if (a.truthy() == (e.kind == Expr::Kind::kOr)) return a;
      return eval(*e.children[1], scope);
    }
    case Expr::Kind::kNot: {
      HEARTH_ASSIGN_OR_RETURN(Value a, eval(*e.children[0], scope));
      return Value::boolean(!a.truthy());
    }
    case Expr::Kind::kCond: {
      HEARTH_ASSIGN_OR_RETURN(Value c, eval(*e.children[1], scope));
      if (c.truthy()) return eval(*e.children[0], scope);
      if (e.children[2]) return eval(*e.children[2], scope);
      return Value::undefined("the inline if's missing else");
    }
  }
  return Value::undefined();
}

absl::StatusOr<Value> Evaluator::eval_name(const Expr& e, const Scope& scope) {
  if (const Value* v = scope.find(e.name)) return *v;
  Value g = find_global(e.name);
  if (!g.is_undefined()) return g;
  return Value::undefined(str_cat("'", e.name, "'"));
}

absl::StatusOr<Value> Evaluator::eval_collection(const Expr& e,
                                                 const std::shared_ptr<Scope>& scope) {
  List items;
  items.reserve(e.children.size());
  for (const ExprPtr& c : e.children) {
    HEARTH_ASSIGN_OR_RETURN(Value v, eval(*c, scope));
    items.push_back(std::move(v));
  }
  if (e.kind == Expr::Kind::kList) return Value::list(std::move(items));
  if (e.kind == Expr::Kind::kTuple) return Value::tuple(std::move(items));
  Dict d;
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    const Value& k = items[i];
    if (k.is_sequence() || k.is_dict() || k.kind() == Value::Kind::kNamespace)
      return locate(absl::InvalidArgumentError(str_cat("unhashable type: '", k.type_name(), "'")),
                    e.pos, "dict literal");
    d.set(k, std::move(items[i + 1]));
  }
  return Value::dict(std::move(d));
}

absl::StatusOr<Value> Evaluator::eval_compare(const Expr& e, const std::shared_ptr<Scope>& scope) {
  HEARTH_ASSIGN_OR_RETURN(Value left, eval(*e.children[0], scope));
  for (size_t i = 0; i < e.ops.size(); ++i) {
    HEARTH_ASSIGN_OR_RETURN(Value right, eval(*e.children[i + 1], scope));
    const std::string& op = e.ops[i];
    bool r = false;
    // Comparing or searching strings reads them (a loop of them over MBs).
    HEARTH_RETURN_IF_ERROR(locate(charge_read(right), e.pos, str_cat("'", op, "'")));
    if (op == "==" || op == "!=") {
      r = values_equal(left, right) == (op == "==");
    } else if (op == "in" || op == "not in") {
      auto c = contains(right, left);
      if (!c.ok()) return locate(c.status(), e.pos, str_cat("'", op, "'"));
      r = *c == (op == "in");
    } else {
      if (left.is_undefined() || right.is_undefined())
        return locate(undefined_error(left.is_undefined() ? left : right), e.pos,
                      str_cat("comparison '", op, "'"));
      auto c = compare_values(left, right);
      if (!c.ok()) return locate(c.status(), e.pos, str_cat("comparison '", op, "'"));
      r = op == "<" ? *c < 0 : op == ">" ? *c > 0 : op == "<=" ? *c <= 0 : *c >= 0;
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

absl::StatusOr<Value> Evaluator::eval_slice(const Expr& e, const std::shared_ptr<Scope>& scope) {
  HEARTH_ASSIGN_OR_RETURN(Value obj, eval(*e.children[0], scope));
  std::optional<int64_t> bounds[3];
  for (int i = 0; i < 3; ++i) {
    if (!e.children[i + 1]) continue;
    HEARTH_ASSIGN_OR_RETURN(Value b, eval(*e.children[i + 1], scope));
    if (b.is_none()) continue;
    if (!b.is_integral()) {
      if (obj.is_undefined()) return locate(undefined_error(obj), e.pos, "slice");
      return Value::undefined("a slice with non-integer bounds");
    }
    bounds[i] = b.as_int();
  }
  HEARTH_RETURN_IF_ERROR(locate(charge_read(obj), e.pos, "slice"));
  auto v = slice(obj, bounds[0], bounds[1], bounds[2]);
  if (!v.ok()) return locate(v.status(), e.pos, "slice");
  return v;
}

absl::StatusOr<CallArgs> Evaluator::eval_args(const Expr& e, size_t first,
                                              const std::shared_ptr<Scope>& scope) {
  CallArgs args;
  for (size_t i = first; i < e.children.size(); ++i) {
    HEARTH_ASSIGN_OR_RETURN(Value v, eval(*e.children[i], scope));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [k, expr] : e.kwargs) {
    HEARTH_ASSIGN_OR_RETURN(Value v, eval(*expr, scope));
    args.named.emplace_back(k, std::move(v));
  }
  return args;
}

absl::StatusOr<Value> Evaluator::eval_call(const Expr& e, const std::shared_ptr<Scope>& scope) {
  HEARTH_ASSIGN_OR_RETURN(Value callee, eval(*e.children[0], scope));
  HEARTH_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1, scope));
  std::string what = "call";
  if (e.children[0]->kind == Expr::Kind::kName || e.children[0]->kind == Expr::Kind::kAttr)
    what = str_cat("call to ", e.children[0]->name, "()");
  if (callee.is_undefined()) return locate(undefined_error(callee), e.pos, what);
  if (callee.kind() != Value::Kind::kCallable)
    return locate(
        absl::InvalidArgumentError(str_cat("'", callee.type_name(), "' object is not callable")),
        e.pos, what);
  auto v = callee.as_callable().call(*this, std::move(args));
  if (!v.ok()) return locate(v.status(), e.pos, what);
  return v;
}

absl::StatusOr<Value> Evaluator::eval_filter(const Expr& e, const std::shared_ptr<Scope>& scope) {
  HEARTH_ASSIGN_OR_RETURN(Value input, eval(*e.children[0], scope));
  HEARTH_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1, scope));
  auto v = call_filter(e.name, input, std::move(args));
  if (!v.ok()) return locate(v.status(), e.pos, str_cat("filter '", e.name, "'"));
  return v;
}

absl::StatusOr<Value> Evaluator::eval_test(const Expr& e, const std::shared_ptr<Scope>& scope) {
  HEARTH_ASSIGN_OR_RETURN(Value input, eval(*e.children[0], scope));
  HEARTH_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1, scope));
  auto v = call_test(e.name, input, std::move(args));
  if (!v.ok()) return locate(v.status(), e.pos, str_cat("test '", e.name, "'"));
  return Value::boolean(*v);
}

absl::StatusOr<Value> Evaluator::call_filter(std::string_view name, const Value& input,
                                             CallArgs args) {
  FilterFn f = find_filter(name);
  if (f == nullptr) return absl::InvalidArgumentError(str_cat("no filter named '", name, "'"));
  HEARTH_RETURN_IF_ERROR(charge_read(input));
  HEARTH_ASSIGN_OR_RETURN(Value v, f(*this, input, args));
  if (v.is_string()) HEARTH_RETURN_IF_ERROR(charge_copy(v.as_string().size()));
  return v;
}

absl::StatusOr<bool> Evaluator::call_test(std::string_view name, const Value& input,
                                          CallArgs args) {
  TestFn t = find_test(name);
  if (t == nullptr) return absl::InvalidArgumentError(str_cat("no test named '", name, "'"));
  return t(*this, input, args);
}

absl::StatusOr<Value> Evaluator::getattr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) return undefined_error(obj);
  bool found = false;
  HEARTH_ASSIGN_OR_RETURN(Value v, get_method_or_attr(obj, name, found));
  if (found) return v;
  if (obj.is_dict()) {
    if (const Value* item = obj.as_dict().find(Value::string(std::string(name)))) return *item;
  }
  return Value::undefined(str_cat("'", obj.type_name(), " object' has no attribute '", name, "'"));
}

absl::StatusOr<Value> Evaluator::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return undefined_error(obj);
  if (obj.is_dict()) {
    if (const Value* item = obj.as_dict().find(key)) return *item;
  } else if (obj.is_sequence() && key.is_integral()) {
    const List& items = obj.as_list();
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(items.size());
    if (i >= 0 && i < static_cast<int64_t>(items.size())) return items[static_cast<size_t>(i)];
  } else if (obj.is_string() && key.is_integral()) {
    HEARTH_RETURN_IF_ERROR(charge_read(obj));
    const std::vector<char32_t> cps = utf8_decode(obj.as_string());
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(cps.size());
    if (i >= 0 && i < static_cast<int64_t>(cps.size())) {
      std::string c;
      utf8_append(c, cps[static_cast<size_t>(i)]);
      return Value::string(std::move(c));
    }
  }
  if (key.is_string()) {
    bool found = false;
    HEARTH_ASSIGN_OR_RETURN(Value v, get_method_or_attr(obj, key.as_string(), found));
    if (found) return v;
  }
  return Value::undefined(str_cat("'", obj.type_name(), " object' has no item ", to_repr(key)));
}

}  // namespace hearth::chat
