#include "chat/evaluator.h"

#include <algorithm>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/builtins.h"
#include "chat/operators.h"

namespace hearth::chat {

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get())
    for (const auto& [k, v] : s->vars)
      if (k == name) return &v;
  return nullptr;
}

void Scope::set(std::string_view name, Value v) {
  for (auto& [k, old] : vars) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  vars.emplace_back(std::string(name), std::move(v));
}

absl::Status locate(const absl::Status& s, Pos pos, std::string_view construct) {
  const std::string_view msg(s.message().data(), s.message().size());
  if (msg.substr(0, 9) == "template ") return s;
  return absl::Status(s.code(), str_cat("template error at ", pos.line, ":", pos.col, " in ",
                                        construct, ": ", msg));
}

namespace {

// A {% macro %}: its definition and the scope it was defined in (weak: the
// scope may hold the macro, and a strong reference would be a cycle).
class Macro : public Callable {
 public:
  Macro(const Stmt* def, std::weak_ptr<Scope> scope) : def_(def), scope_(std::move(scope)) {}
  std::string_view name() const override { return def_->name; }
  absl::StatusOr<Value> call(Evaluator& ev, CallArgs args) const override {
    std::shared_ptr<Scope> scope = scope_.lock();
    if (!scope) return absl::FailedPreconditionError("macro called after its scope ended");
    return ev.call_macro(*def_, scope, std::move(args));
  }

 private:
  const Stmt* def_;
  std::weak_ptr<Scope> scope_;
};

// Nesting depth of a value (0 for scalars), stopping once above `limit`,
// and whether it holds a namespace.
int nesting(const Value& v, int limit, bool& has_namespace) {
  if (v.kind() == Value::Kind::kNamespace) has_namespace = true;
  if (limit < 0) return 1;
  int d = 0;
  if (v.is_sequence()) {
    for (const Value& x : v.as_list()) d = std::max(d, nesting(x, limit - 1, has_namespace));
    return d + 1;
  }
  if (v.is_dict()) {
    for (const auto& [k, x] : v.as_dict().entries)
      d = std::max(d, nesting(x, limit - 1, has_namespace));
    return d + 1;
  }
  return 0;
}

constexpr int kMaxValueNesting = 64;

}  // namespace

absl::Status Evaluator::charge(uint64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps)
    return absl::ResourceExhaustedError(
        str_cat("template exceeds its budget of ", limits_.max_steps, " steps"));
  return absl::OkStatus();
}

absl::Status Evaluator::check_bytes(size_t n) const {
  if (n > limits_.max_output_bytes)
    return absl::ResourceExhaustedError(
        str_cat("string of ", n, " bytes exceeds the limit of ", limits_.max_output_bytes));
  return absl::OkStatus();
}

absl::Status Evaluator::charge_copy(size_t n) {
  HEARTH_RETURN_IF_ERROR(check_bytes(n));
  return charge(n / 1024);
}

absl::Status Evaluator::charge_read(const Value& v) {
  return v.is_string() ? charge(v.as_string().size() / 256) : absl::OkStatus();
}

absl::Status Evaluator::check_items(size_t n) const {
  if (n > limits_.max_list_items)
    return absl::ResourceExhaustedError(
        str_cat("list of ", n, " items exceeds the limit of ", limits_.max_list_items));
  return absl::OkStatus();
}

absl::StatusOr<std::string> Evaluator::render(const Body& body, std::shared_ptr<Scope> root) {
  std::string out;
  out_ = &out;
  HEARTH_RETURN_IF_ERROR(exec_body(body, root).status());
  out_ = nullptr;
  return out;
}

absl::Status Evaluator::emit(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes)
    return absl::ResourceExhaustedError(
        str_cat("template output exceeds ", limits_.max_output_bytes, " bytes"));
  out_->append(text);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Evaluator::capture(const Body& body,
                                               const std::shared_ptr<Scope>& scope) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  auto flow = exec_body(body, scope);
  out_ = saved;
  if (!flow.ok()) return flow.status();
  return buffer;
}

// ---- statements ----

absl::StatusOr<Evaluator::Flow> Evaluator::exec_body(const Body& body,
                                                     const std::shared_ptr<Scope>& scope) {
  HEARTH_RETURN_IF_ERROR(enter());
  for (const StmtPtr& s : body) {
    auto f = exec(*s, scope);
    if (!f.ok() || *f != Flow::kNormal) {
      leave();
      return f;
    }
  }
  leave();
  return Flow::kNormal;
}

absl::StatusOr<Evaluator::Flow> Evaluator::exec(const Stmt& s,
                                                const std::shared_ptr<Scope>& scope) {
  switch (s.kind) {
    case Stmt::Kind::kText:
      HEARTH_RETURN_IF_ERROR(emit(s.text));
      return Flow::kNormal;
    case Stmt::Kind::kOutput: {
      HEARTH_ASSIGN_OR_RETURN(Value v, eval(*s.expr, scope));
      HEARTH_RETURN_IF_ERROR(emit(to_str(v)));
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf:
      return exec_if(s, scope);
    case Stmt::Kind::kFor:
      return exec_for(s, scope);
    case Stmt::Kind::kSet:
      HEARTH_RETURN_IF_ERROR(exec_set(s, scope));
      return Flow::kNormal;
    case Stmt::Kind::kSetBlock:
      HEARTH_RETURN_IF_ERROR(exec_set_block(s, scope));
      return Flow::kNormal;
    case Stmt::Kind::kMacro:
      scope->set(s.name, Value::callable(std::make_shared<Macro>(&s, scope)));
      return Flow::kNormal;
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

absl::StatusOr<Evaluator::Flow> Evaluator::exec_if(const Stmt& s,
                                                   const std::shared_ptr<Scope>& scope) {
  for (const auto& [cond, body] : s.branches) {
    if (cond) {
      HEARTH_ASSIGN_OR_RETURN(Value c, eval(*cond, scope));
      if (!c.truthy()) continue;
    }
    return exec_body(body, scope);
  }
  return Flow::kNormal;
}

absl::Status Evaluator::bind_targets(const Stmt& s, Scope& scope, const Value& v) {
  if (s.targets.size() == 1) {
    scope.set(s.targets[0], v);
    return absl::OkStatus();
  }
  if (!v.is_sequence())
    return absl::InvalidArgumentError(str_cat("cannot unpack non-sequence ", v.type_name(),
                                              " into ", s.targets.size(), " names"));
  if (v.as_list().size() != s.targets.size())
    return absl::InvalidArgumentError(
        str_cat("expected ", s.targets.size(), " values to unpack, got ", v.as_list().size()));
  for (size_t i = 0; i < s.targets.size(); ++i) scope.set(s.targets[i], v.as_list()[i]);
  return absl::OkStatus();
}

namespace {

// jinja2's `loop` object for item `i` of `items`.
Value loop_object(const List& items, size_t i) {
  const auto n = static_cast<int64_t>(items.size());
  const auto k = static_cast<int64_t>(i);
  Dict d;
  d.entries.reserve(12);
  d.entries.emplace_back(Value::string("index"), Value::integer(k + 1));
  d.entries.emplace_back(Value::string("index0"), Value::integer(k));
  d.entries.emplace_back(Value::string("revindex"), Value::integer(n - k));
  d.entries.emplace_back(Value::string("revindex0"), Value::integer(n - k - 1));
  d.entries.emplace_back(Value::string("first"), Value::boolean(k == 0));
  d.entries.emplace_back(Value::string("last"), Value::boolean(k == n - 1));
  d.entries.emplace_back(Value::string("length"), Value::integer(n));
  d.entries.emplace_back(Value::string("depth"), Value::integer(1));
  d.entries.emplace_back(Value::string("depth0"), Value::integer(0));
  if (i > 0) d.entries.emplace_back(Value::string("previtem"), items[i - 1]);
  if (i + 1 < items.size()) d.entries.emplace_back(Value::string("nextitem"), items[i + 1]);
  return Value::dict(std::move(d));
}

}  // namespace

absl::StatusOr<Evaluator::Flow> Evaluator::exec_for(const Stmt& s,
                                                    const std::shared_ptr<Scope>& scope) {
  HEARTH_ASSIGN_OR_RETURN(Value iterable, eval(*s.expr, scope));
  auto all = iterate(*this, iterable);
  if (!all.ok()) return locate(all.status(), s.pos, "for loop");
  List items;
  if (s.filter) {
    for (Value& item : *all) {
      HEARTH_RETURN_IF_ERROR(charge(1));
      auto iteration = std::make_shared<Scope>(Scope{scope, {}});
      HEARTH_RETURN_IF_ERROR(locate(bind_targets(s, *iteration, item), s.pos, "for loop"));
      HEARTH_ASSIGN_OR_RETURN(Value keep, eval(*s.filter, iteration));
      if (keep.truthy()) items.push_back(std::move(item));
    }
  } else {
    items = std::move(*all);
  }
  // As jinja2 compiles it, `else` runs unless some iteration's body ran to
  // its end (not only when there were no items: also when every iteration
  // left by continue or break).
  bool body_completed = false;
  for (size_t i = 0; i < items.size(); ++i) {
    HEARTH_RETURN_IF_ERROR(locate(charge(1), s.pos, "for loop"));
    auto iteration = std::make_shared<Scope>(Scope{scope, {}});
    iteration->set("loop", loop_object(items, i));
    HEARTH_RETURN_IF_ERROR(locate(bind_targets(s, *iteration, items[i]), s.pos, "for loop"));
    HEARTH_ASSIGN_OR_RETURN(Flow f, exec_body(s.body, iteration));
    if (f == Flow::kBreak) break;
    body_completed = body_completed || f == Flow::kNormal;
  }
  if (!body_completed) return exec_body(s.else_body, scope);
  return Flow::kNormal;
}

absl::Status Evaluator::exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  HEARTH_ASSIGN_OR_RETURN(Value v, eval(*s.expr, scope));
  bool has_namespace = false;
  if (nesting(v, kMaxValueNesting, has_namespace) > kMaxValueNesting)
    return locate(absl::ResourceExhaustedError("value nested too deeply"), s.pos, "set");
  if (s.attr.empty()) return locate(bind_targets(s, *scope, v), s.pos, "set");
  const Value* target = scope->find(s.targets[0]);
  if (target == nullptr || target->kind() != Value::Kind::kNamespace)
    return locate(absl::InvalidArgumentError("cannot assign attribute on non-namespace object"),
                  s.pos, "set");
  if (has_namespace)
    return locate(absl::InvalidArgumentError("a namespace cannot hold another namespace"), s.pos,
                  "set");
  target->as_namespace().attrs.set(Value::string(s.attr), std::move(v));
  return absl::OkStatus();
}

absl::Status Evaluator::exec_set_block(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  HEARTH_ASSIGN_OR_RETURN(std::string text, capture(s.body, scope));
  scope->set(s.targets[0], Value::string(std::move(text)));
  return absl::OkStatus();
}

absl::StatusOr<Value> Evaluator::call_macro(const Stmt& def, const std::shared_ptr<Scope>& scope,
                                            CallArgs args) {
  if (call_depth_ >= limits_.max_call_depth)
    return absl::ResourceExhaustedError(
        str_cat("macro calls nested deeper than ", limits_.max_call_depth));
  HEARTH_RETURN_IF_ERROR(charge(1));
  if (args.positional.size() > def.params.size())
    return absl::InvalidArgumentError(
        str_cat("macro '", def.name, "' takes not more than ", def.params.size(), " argument(s)"));
  auto local = std::make_shared<Scope>(Scope{scope, {}});
  for (size_t i = 0; i < def.params.size(); ++i) {
    if (i < args.positional.size()) {
      local->set(def.params[i], std::move(args.positional[i]));
      continue;
    }
    auto named = std::find_if(args.named.begin(), args.named.end(),
                              [&](const auto& kv) { return kv.first == def.params[i]; });
    if (named != args.named.end()) {
      local->set(def.params[i], std::move(named->second));
      named->first.clear();
    } else if (def.defaults[i]) {
      HEARTH_ASSIGN_OR_RETURN(Value d, eval(*def.defaults[i], local));
      local->set(def.params[i], std::move(d));
    } else {
      local->set(def.params[i], Value::undefined(str_cat("'", def.params[i], "'")));
    }
  }
  // Keyword arguments left over (consumed ones were cleared) name no parameter.
  for (const auto& named : args.named) {
    const std::string& key = named.first;
    const bool is_param = std::find(def.params.begin(), def.params.end(), key) != def.params.end();
    if (!key.empty() && !is_param)
      return absl::InvalidArgumentError(
          str_cat("macro '", def.name, "' takes no keyword argument '", key, "'"));
  }
  ++call_depth_;
  auto text = capture(def.body, local);
  --call_depth_;
  if (!text.ok()) return text.status();
  return Value::string(std::move(*text));
}

}  // namespace hearth::chat
