#include "server/response_format.h"

#include <list>
#include <mutex>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "base/status_macros.h"
#include "base/str_cat.h"
#include "grammar/json_schema.h"

namespace hearth::server {
namespace {

absl::Status with_field(std::string_view field, const absl::Status& s) {
  return absl::Status(s.code(), str_cat("response_format.", field, ": ", s.message()));
}

// Compiled grammars by their source: requests that repeat a format share one
// Grammar, and with it the token masks its earlier requests computed (a
// mask costs a walk over the vocabulary; a cached one, a lookup). Holds the
// kCapacity formats used last. Process-wide: owned by this file, guarded by
// mu_.
class RecentFormats {
 public:
  static constexpr std::size_t kCapacity = 8;

  std::shared_ptr<const grammar::Grammar> find(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);  // now the most recent
    return it->second->second;
  }
  void insert(const std::string& key, std::shared_ptr<const grammar::Grammar> g) {
    std::lock_guard lock(mu_);
    if (index_.contains(key)) return;
    order_.emplace_front(key, std::move(g));
    index_[key] = order_.begin();
    if (order_.size() > kCapacity) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const grammar::Grammar>>;
  std::mutex mu_;
  std::list<Entry> order_;  // most recent first
  absl::flat_hash_map<std::string, std::list<Entry>::iterator> index_;
};

RecentFormats& recent_formats() {
  static RecentFormats* formats = new RecentFormats();  // never destroyed: used until exit
  return *formats;
}

absl::StatusOr<std::shared_ptr<const grammar::Grammar>> compile(
    const hearth::v1::ResponseFormat& format) {
  using F = hearth::v1::ResponseFormat;
  switch (format.format_case()) {
    case F::FORMAT_NOT_SET:
      return nullptr;
    case F::kAnyJson: {
      if (!format.any_json())
        return absl::InvalidArgumentError("response_format.any_json: must be true when set");
      absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g =
          grammar::Grammar::parse(grammar::any_json_gbnf());
      if (!g.ok()) return with_field("any_json", absl::InternalError(g.status().message()));
      return g;
    }
    case F::kGrammar: {
      absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g =
          grammar::Grammar::parse(format.grammar());
      if (absl::IsResourceExhausted(g.status()))  // too large: the client's to shrink
        return with_field("grammar", absl::InvalidArgumentError(g.status().message()));
      if (!g.ok()) return with_field("grammar", g.status());
      return g;
    }
    case F::kJsonSchema: {
      absl::StatusOr<std::string> gbnf = grammar::json_schema_to_gbnf(format.json_schema());
      if (!gbnf.ok()) return with_field("json_schema", gbnf.status());
      absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g = grammar::Grammar::parse(*gbnf);
      // The converter writes only grammars the parser accepts, so a refusal
      // here is hearth's bug, not the client's, unless the schema is too
      // large for the grammar's limits (25 strings of maxLength 10000).
      if (absl::IsResourceExhausted(g.status()))
        return with_field("json_schema", absl::InvalidArgumentError(str_cat(
                                             "the schema is too large: ", g.status().message())));
      if (!g.ok()) return with_field("json_schema", absl::InternalError(g.status().message()));
      return g;
    }
  }
  return absl::InvalidArgumentError("response_format: unknown format");
}

}  // namespace

absl::StatusOr<std::shared_ptr<const grammar::Grammar>> compile_response_format(
    const hearth::v1::ResponseFormat& format) {
  if (format.format_case() == hearth::v1::ResponseFormat::FORMAT_NOT_SET) return nullptr;
  const std::string key = format.SerializeAsString();
  if (std::shared_ptr<const grammar::Grammar> g = recent_formats().find(key)) return g;
  HEARTH_ASSIGN_OR_RETURN(std::shared_ptr<const grammar::Grammar> g, compile(format));
  recent_formats().insert(key, g);
  return g;
}

}  // namespace hearth::server
