// Which tokens of a vocabulary a grammar allows next, per matcher state.
//
// A token may cover several grammar symbols and part of a UTF-8 character,
// so the mask of a state is found by walking every token's bytes through
// the matcher. The walk visits the tokens in byte order and shares the work
// of common prefixes (a trie walk over the sorted vocabulary): a prefix the
// grammar refuses discards every token that starts with it. Masks are cached
// per (grammar, vocabulary, state) in the grammar's MaskCache, which every
// sequence under that grammar shares: constrained generation meets few
// distinct states (a JSON string's body is one state while its length is
// unbounded), so most steps are one hash lookup.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace hearth::grammar {

using TokenMask = std::vector<std::uint64_t>;  // bit id % 64 of word id / 64: allowed

// A vocabulary as output bytes: token id -> the bytes it adds (empty for
// tokens a grammar never allows: control, unknown, unused). Immutable.
class VocabularyIndex {
 public:
  explicit VocabularyIndex(std::vector<std::string> token_bytes);

  std::size_t size() const { return bytes_.size(); }
  const std::string& bytes(std::int32_t id) const { return bytes_[static_cast<std::size_t>(id)]; }
  // Identity for caches (unique per index built in this process).
  std::uint64_t serial() const { return serial_; }
  // The mask of tokens `state` allows.
  TokenMask mask(const Grammar& grammar, const ParseState& state) const;
  // The same, or nullopt once the walk has done more than `max_work` of the
  // matcher's work (matcher_work()); `*work` is set to the work it did.
  std::optional<TokenMask> mask(const Grammar& grammar, const ParseState& state,
                                std::uint64_t max_work, std::uint64_t* work) const;

 private:
  std::vector<std::string> bytes_;
  std::vector<std::int32_t> order_;    // non-empty token ids, bytes ascending
  std::vector<std::uint32_t> shared_;  // per order_ entry: common prefix with the previous
  std::size_t longest_ = 0;
  std::uint64_t serial_;
};

// Masks computed for one grammar, by vocabulary and state. Thread-safe (one
// mutex; masks are immutable once stored). Holds at most kMaxBytes of masks;
// beyond that, masks are computed and not kept.
class MaskCache {
 public:
  static constexpr std::size_t kMaxBytes = std::size_t{16} << 20;

  std::shared_ptr<const TokenMask> find(std::uint64_t vocabulary, const std::string& key);
  void insert(std::uint64_t vocabulary, const std::string& key, std::shared_ptr<const TokenMask>);

 private:
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const TokenMask>> masks_;  // key: serial + state
  std::size_t bytes_ = 0;
  std::string lookup_;  // reused key buffer, under mu_
};

// One constrained output: the matcher state of the text generated so far
// and the mask of the tokens that may come next. Not thread-safe (one
// sequence's driver); the grammar and vocabulary are shared.
//
// The masks are walked on the thread that steps every sequence of the
// model, and an ambiguous grammar (a pattern like "(.*a){200}") can make
// each token's mask a new state that costs seconds to walk. So the walks of
// one output may take, on average, a work budget per token it generates:
// kWorkPerEntry of the matcher's steps (matcher_work()) per vocabulary
// entry and at least kMinWorkPerToken (a few ms; small vocabularies), banked
// for at most kBankTokens tokens (which is also what the first mask may
// take). An ordinary JSON schema's widest mask costs 58-86 per entry (a
// state inside a string, where a maxLength makes every token's state new;
// an array of objects), at 32,000 entries as at 128,000. This caps the
// cost per token at about 3x that, not an output's total: an ordinary
// schema over a large vocabulary may rightly take that long per token for
// as many tokens as it is allowed.
class ConstrainedOutput {
 public:
  static constexpr std::uint64_t kWorkPerEntry = 256;
  static constexpr std::uint64_t kMinWorkPerToken = std::uint64_t{1} << 20;
  static constexpr std::uint64_t kBankTokens = 16;

  // `work_per_token` 0: kWorkPerEntry x the vocabulary's size, at least
  // kMinWorkPerToken.
  ConstrainedOutput(std::shared_ptr<const Grammar> grammar,
                    std::shared_ptr<const VocabularyIndex> vocabulary,
                    std::uint64_t work_per_token = 0);

  // Bit per token id: whether the grammar allows that token next. Valid
  // until accept_token(). FailedPrecondition, naming response_format, once
  // a mask would take more than the budget has left.
  absl::StatusOr<std::span<const std::uint64_t>> allowed();
  // Advances past token `id`; false (state unchanged) when the grammar
  // refuses it.
  bool accept_token(std::int32_t id);
  bool complete() const { return state_.complete(); }
  bool must_end() const { return state_.must_end(); }

  // Why allowed() gave an empty mask: the grammar itself, the matcher's
  // bounds (grammar::bound_refusals(): the output so far can be parsed in
  // too many ways), or a walk longer than a full bank while finding out.
  // Walks the mask again: for the error message that ends the request.
  enum class EmptyMaskCause { kGrammar, kBounds, kWorkBudget };
  EmptyMaskCause why_empty();

  std::size_t masks_computed() const { return computed_; }
  std::size_t masks_cached() const { return cached_; }

 private:
  absl::Status over_budget() const;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const VocabularyIndex> vocabulary_;
  ParseState state_, next_, step_;  // next_, step_: reused storage of accept_token()
  std::string key_;
  std::shared_ptr<const TokenMask> mask_;  // of state_, or null until allowed()
  std::size_t computed_ = 0, cached_ = 0;
  const std::uint64_t work_per_token_;
  std::uint64_t work_left_;  // at most kBankTokens x work_per_token_
};

}  // namespace hearth::grammar
