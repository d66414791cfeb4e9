// Renders a parsed template: one Evaluator per render call, owning the
// output buffer, the variable scopes and the resource budget. Nothing here
// is shared between calls, so renders of one template run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chat/ast.h"
#include "chat/value.h"

namespace hearth::chat {

// Bounds on one render; exceeding one is RESOURCE_EXHAUSTED.
struct RenderLimits {
  size_t max_output_bytes = 8u << 20;  // also bounds every string value; < kMaxReprBytes
  size_t max_list_items = 1u << 20;
  int max_call_depth = 64;  // nested macro calls
  // Nested evaluation (expressions within statements within macro calls):
  // bounds the C++ stack one render uses.
  int max_eval_depth = 1000;
  uint64_t max_steps = 20'000'000;  // loop iterations, calls, per-item work
};

// Variables of one block level: the template, one loop iteration, one
// macro call. Lookups fall back to the parent.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;
  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value v);
};

class Evaluator {
 public:
  Evaluator(const RenderLimits& limits, int64_t now_unix_seconds)
      : limits_(limits), now_(now_unix_seconds) {}

  absl::StatusOr<std::string> render(const Body& body, std::shared_ptr<Scope> root);

  // For builtins: spends `n` units of the step budget.
  absl::Status charge(uint64_t n);
  // For builtins: fails when a string or list of this size is too large.
  absl::Status check_bytes(size_t n) const;
  absl::Status check_items(size_t n) const;
  // For builtins that build a string of `n` bytes by copying: check_bytes,
  // and a step per KiB, since copying costs time (a loop growing a string by
  // concatenation ran for hours within the step budget; a step of a loop
  // costs about as long as copying a few KiB).
  absl::Status charge_copy(size_t n);
  // For builtins that read a whole string (a filter, a method, a slice: they
  // decode or copy it): a step per 256 bytes of it; nothing for other values.
  absl::Status charge_read(const Value& v);
  const RenderLimits& limits() const { return limits_; }
  int64_t now() const { return now_; }

  absl::StatusOr<Value> getattr(const Value& obj, std::string_view name);
  absl::StatusOr<Value> getitem(const Value& obj, const Value& key);
  absl::StatusOr<Value> call_filter(std::string_view name, const Value& input, CallArgs args);
  absl::StatusOr<bool> call_test(std::string_view name, const Value& input, CallArgs args);
  absl::StatusOr<Value> call_macro(const Stmt& def, const std::shared_ptr<Scope>& scope,
                                   CallArgs args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  absl::StatusOr<Flow> exec_body(const Body& body, const std::shared_ptr<Scope>& scope);
  absl::StatusOr<Flow> exec(const Stmt& s, const std::shared_ptr<Scope>& scope);
  absl::StatusOr<Flow> exec_if(const Stmt& s, const std::shared_ptr<Scope>& scope);
  absl::StatusOr<Flow> exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope);
  absl::Status exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope);
  absl::Status exec_set_block(const Stmt& s, const std::shared_ptr<Scope>& scope);
  absl::Status bind_targets(const Stmt& s, Scope& scope, const Value& v);
  absl::StatusOr<std::string> capture(const Body& body, const std::shared_ptr<Scope>& scope);
  absl::Status emit(std::string_view text);

  absl::StatusOr<Value> eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  absl::StatusOr<Value> eval_node(const Expr& e, const std::shared_ptr<Scope>& scope);
  absl::Status enter();  // counts one level of nesting against max_eval_depth
  void leave() { --eval_depth_; }
  absl::StatusOr<Value> eval_name(const Expr& e, const Scope& scope);
  absl::StatusOr<Value> eval_collection(const Expr& e, const std::shared_ptr<Scope>& scope);
  absl::StatusOr<Value> eval_compare(const Expr& e, const std::shared_ptr<Scope>& scope);
  absl::StatusOr<Value> eval_slice(const Expr& e, const std::shared_ptr<Scope>& scope);
  absl::StatusOr<Value> eval_call(const Expr& e, const std::shared_ptr<Scope>& scope);
  absl::StatusOr<Value> eval_filter(const Expr& e, const std::shared_ptr<Scope>& scope);
  absl::StatusOr<Value> eval_test(const Expr& e, const std::shared_ptr<Scope>& scope);
  absl::StatusOr<CallArgs> eval_args(const Expr& e, size_t first,
                                     const std::shared_ptr<Scope>& scope);

  RenderLimits limits_;
  int64_t now_;
  std::string* out_ = nullptr;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
};

// Adds "template error at L:C in <construct>: " to a status that does not
// yet name a position, keeping its code.
absl::Status locate(const absl::Status& s, Pos pos, std::string_view construct);

}  // namespace hearth::chat
