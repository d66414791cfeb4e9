#include "grammar/token_mask.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <numeric>

#include "base/str_cat.h"

namespace hearth::grammar {
namespace {

std::uint64_t next_serial() {
  static std::atomic<std::uint64_t> serial{0};
  return ++serial;
}

}  // namespace

VocabularyIndex::VocabularyIndex(std::vector<std::string> token_bytes)
    : bytes_(std::move(token_bytes)), serial_(next_serial()) {
  for (std::size_t id = 0; id < bytes_.size(); ++id)
    if (!bytes_[id].empty()) order_.push_back(static_cast<std::int32_t>(id));
  std::sort(order_.begin(), order_.end(),
            [&](std::int32_t a, std::int32_t b) { return bytes(a) < bytes(b); });
  shared_.resize(order_.size(), 0);
  for (std::size_t i = 0; i < order_.size(); ++i) {
    const std::string& t = bytes(order_[i]);
    longest_ = std::max(longest_, t.size());
    if (i == 0) continue;
    const std::string& prev = bytes(order_[i - 1]);
    const auto [a, b] = std::mismatch(t.begin(), t.end(), prev.begin(), prev.end());
    shared_[i] = static_cast<std::uint32_t>(a - t.begin());
  }
}

TokenMask VocabularyIndex::mask(const Grammar& grammar, const ParseState& state) const {
  std::uint64_t work = 0;
  return *mask(grammar, state, std::numeric_limits<std::uint64_t>::max(), &work);
}

// levels[d] is the state after the first d bytes of the current token;
// `alive` counts the bytes of the previous token the grammar accepted, so
// levels[0..alive] also hold for the prefix this token shares with it.
std::optional<TokenMask> VocabularyIndex::mask(const Grammar& grammar, const ParseState& state,
                                               std::uint64_t max_work, std::uint64_t* work) const {
  const std::uint64_t start = matcher_work();
  *work = 0;
  TokenMask mask((bytes_.size() + 63) / 64, 0);
  if (state.dead()) return mask;
  std::vector<ParseState> levels(longest_ + 1);
  levels[0] = state;
  std::size_t alive = 0;
  for (std::size_t i = 0; i < order_.size(); ++i) {
    *work = matcher_work() - start;
    if (*work > max_work) return std::nullopt;
    const std::string& t = bytes(order_[i]);
    if (shared_[i] > alive) continue;  // starts with a prefix the grammar refused
    std::size_t d = shared_[i];
    for (; d < t.size(); ++d)
      if (!advance(grammar, levels[d], static_cast<unsigned char>(t[d]), levels[d + 1])) break;
    alive = d;
    if (d == t.size()) {
      const auto id = static_cast<std::size_t>(order_[i]);
      mask[id / 64] |= std::uint64_t{1} << (id % 64);
    }
  }
  *work = matcher_work() - start;
  if (*work > max_work) return std::nullopt;
  return mask;
}

std::shared_ptr<const TokenMask> MaskCache::find(std::uint64_t vocabulary, const std::string& key) {
  std::lock_guard lock(mu_);
  lookup_.assign(reinterpret_cast<const char*>(&vocabulary), sizeof vocabulary);
  lookup_.append(key);
  auto it = masks_.find(lookup_);
  return it == masks_.end() ? nullptr : it->second;
}

void MaskCache::insert(std::uint64_t vocabulary, const std::string& key,
                       std::shared_ptr<const TokenMask> mask) {
  std::string full(reinterpret_cast<const char*>(&vocabulary), sizeof vocabulary);
  full.append(key);
  const std::size_t size = mask->size() * sizeof(std::uint64_t) + full.size();
  std::lock_guard lock(mu_);
  if (bytes_ + size > kMaxBytes) return;
  if (masks_.try_emplace(std::move(full), std::move(mask)).second) bytes_ += size;
}

ConstrainedOutput::ConstrainedOutput(std::shared_ptr<const Grammar> grammar,
                                     std::shared_ptr<const VocabularyIndex> vocabulary,
                                     std::uint64_t work_per_token)
    : grammar_(std::move(grammar)),
      vocabulary_(std::move(vocabulary)),
      state_(initial_state(*grammar_)),
      work_per_token_(std::min<std::uint64_t>(
          work_per_token != 0 ? work_per_token
                              : std::max(kMinWorkPerToken, kWorkPerEntry * vocabulary_->size()),
          std::uint64_t{1} << 48)),  // the bank's arithmetic cannot overflow
      work_left_(kBankTokens * work_per_token_) {}

absl::Status ConstrainedOutput::over_budget() const {
  return absl::FailedPreconditionError(
      str_cat("response_format: following the grammar took more than ", work_per_token_,
              " matcher steps per generated token: the text so far can be parsed in so many "
              "ways that each token's mask is a new, long walk of the vocabulary; make the "
              "grammar or pattern less ambiguous"));
}

absl::StatusOr<std::span<const std::uint64_t>> ConstrainedOutput::allowed() {
  if (mask_ == nullptr) {
    state_.key(key_);
    MaskCache& cache = grammar_->mask_cache();
    mask_ = cache.find(vocabulary_->serial(), key_);
    if (mask_ != nullptr) {
      ++cached_;
    } else {
      std::uint64_t work = 0;
      std::optional<TokenMask> walked = vocabulary_->mask(*grammar_, state_, work_left_, &work);
      work_left_ -= std::min(work, work_left_);
      if (!walked) return over_budget();
      auto computed = std::make_shared<const TokenMask>(*std::move(walked));
      cache.insert(vocabulary_->serial(), key_, computed);
      mask_ = std::move(computed);
      ++computed_;
    }
  }
  return std::span<const std::uint64_t>(*mask_);
}

ConstrainedOutput::EmptyMaskCause ConstrainedOutput::why_empty() {
  // A walk of its own budget (what a bank holds), not the output's: it ends
  // the request either way, and must not blame the budget for the bounds.
  const std::uint64_t before = bound_refusals();
  std::uint64_t work = 0;
  const bool walked =
      vocabulary_->mask(*grammar_, state_, kBankTokens * work_per_token_, &work).has_value();
  if (!walked) return EmptyMaskCause::kWorkBudget;
  return bound_refusals() != before ? EmptyMaskCause::kBounds : EmptyMaskCause::kGrammar;
}

bool ConstrainedOutput::accept_token(std::int32_t id) {
  if (id < 0 || static_cast<std::size_t>(id) >= vocabulary_->size()) return false;
  const std::string& t = vocabulary_->bytes(id);
  if (t.empty()) return false;
  next_ = state_;
  for (char b : t) {
    if (!advance(*grammar_, next_, static_cast<unsigned char>(b), step_)) return false;
    std::swap(next_, step_);
  }
  std::swap(state_, next_);
  mask_ = nullptr;
  work_left_ = std::min(kBankTokens * work_per_token_, work_left_ + work_per_token_);
  return true;
}

}  // namespace hearth::grammar
