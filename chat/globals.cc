// Global functions: jinja2's range, dict and namespace, and the two
// Hugging Face adds for chat templates, raise_exception and strftime_now.
#include <ctime>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "chat/builtin_args.h"
#include "chat/builtins.h"
#include "chat/evaluator.h"

namespace hearth::chat {
namespace {

using Fn = absl::StatusOr<Value> (*)(Evaluator& ev, CallArgs& args);

class Global : public Callable {
 public:
  Global(std::string_view name, Fn fn) : name_(name), fn_(fn) {}
  std::string_view name() const override { return name_; }
  absl::StatusOr<Value> call(Evaluator& ev, CallArgs args) const override { return fn_(ev, args); }

 private:
  std::string_view name_;
  Fn fn_;
};

// jinja2's sandbox refuses ranges longer than this (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

absl::StatusOr<Value> range(Evaluator& ev, CallArgs& args) {
  if (!args.named.empty()) return absl::InvalidArgumentError("range() takes no keyword arguments");
  for (const Value& v : args.positional)
    if (!v.is_integral())
      return absl::InvalidArgumentError(
          str_cat("'", v.type_name(), "' object cannot be interpreted as an integer"));
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3)
    return absl::InvalidArgumentError("range expects 1 to 3 arguments");
  const int64_t start = p.size() == 1 ? 0 : p[0].as_int();
  const int64_t stop = p.size() == 1 ? p[0].as_int() : p[1].as_int();
  const int64_t step = p.size() == 3 ? p[2].as_int() : 1;
  if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
  const __int128 span = step > 0 ? (__int128)stop - start : (__int128)start - stop;
  const __int128 mag = step > 0 ? step : -(__int128)step;
  const __int128 n = span <= 0 ? 0 : (span + mag - 1) / mag;
  if (n > kMaxRange)
    return absl::InvalidArgumentError(
        "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  HEARTH_RETURN_IF_ERROR(ev.charge(static_cast<uint64_t>(n)));
  List out;
  for (__int128 i = 0; i < n; ++i)
    out.push_back(Value::integer(static_cast<int64_t>(start + i * step)));
  return Value::list(std::move(out));
}

// dict(**kw) / namespace(mapping?, **kw): the keyword arguments as a dict,
// after the entries of an optional positional mapping.
absl::StatusOr<Dict> kwargs_dict(const CallArgs& args, std::string_view fn) {
  Dict d;
  if (args.positional.size() > 1 || (args.positional.size() == 1 && !args.positional[0].is_dict()))
    return absl::InvalidArgumentError(str_cat(fn, "() takes at most one mapping argument"));
  if (!args.positional.empty()) d = args.positional[0].as_dict();
  for (const auto& [k, v] : args.named) d.set(Value::string(k), v);
  return d;
}

absl::StatusOr<Value> dict(Evaluator&, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(Dict d, kwargs_dict(args, "dict"));
  return Value::dict(std::move(d));
}

absl::StatusOr<Value> ns(Evaluator&, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(Dict d, kwargs_dict(args, "namespace"));
  for (const auto& [k, v] : d.entries)
    if (v.kind() == Value::Kind::kNamespace)
      return absl::InvalidArgumentError("a namespace cannot hold another namespace");
  auto n = std::make_shared<Namespace>();
  n->attrs = std::move(d);
  return Value::ns(std::move(n));
}

absl::StatusOr<Value> raise_exception(Evaluator&, CallArgs& args) {
  const Value* msg = arg(args, 0, "message");
  return absl::InvalidArgumentError(msg == nullptr ? std::string("raise_exception()")
                                                   : to_str(*msg));
}

// datetime.now().strftime(fmt), on the render's clock (UTC).
absl::StatusOr<Value> strftime_now(Evaluator& ev, CallArgs& args) {
  const Value* fmt = arg(args, 0, "format");
  if (fmt == nullptr || !fmt->is_string())
    return absl::InvalidArgumentError("strftime_now() needs a format string");
  if (fmt->as_string().size() > 256) return absl::InvalidArgumentError("format string too long");
  const std::time_t t = static_cast<std::time_t>(ev.now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[1024];
  const size_t n = std::strftime(buf, sizeof(buf), fmt->as_string().c_str(), &tm);
  return Value::string(std::string(buf, n));
}

}  // namespace

Value find_global(std::string_view name) {
  static const auto* globals = new std::vector<std::pair<std::string_view, Value>>{
      {"range", Value::callable(std::make_shared<Global>("range", range))},
      {"dict", Value::callable(std::make_shared<Global>("dict", dict))},
      {"namespace", Value::callable(std::make_shared<Global>("namespace", ns))},
      {"raise_exception",
       Value::callable(std::make_shared<Global>("raise_exception", raise_exception))},
      {"strftime_now", Value::callable(std::make_shared<Global>("strftime_now", strftime_now))},
  };
  for (const auto& [n, v] : *globals)
    if (n == name) return v;
  return Value::undefined();
}

}  // namespace hearth::chat
