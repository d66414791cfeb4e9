#include "tools/perplexity.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "base/status_macros.h"
#include "base/str_cat.h"
#include "engine/logprobs.h"
#include "memory/thread_temp_allocator.h"

namespace hearth::quality {
namespace {

// Scores rows: the NLL of the token each predicts, and, when asked, saves
// their log-probabilities or compares them with a base run's.
class RowScorer {
 public:
  RowScorer(std::size_t n_vocab, const EvaluateOptions& options, PerplexityResult& result)
      : n_vocab_(n_vocab),
        save_(options.save),
        base_(options.base),
        result_(result),
        logprobs_(n_vocab),
        base_row_(options.base ? n_vocab : 0) {}

  absl::Status score(const float* logits, std::int32_t target) {
    const double lse = engine::log_sum_exp(logits, n_vocab_);
    result_.nll.add(lse - logits[target]);
    if (save_ == nullptr && base_ == nullptr) return absl::OkStatus();
    // Both sides of a comparison, and the saved file, use the same float
    // log-probabilities, so a run against its own file gives exactly 0.
    for (std::size_t i = 0; i < n_vocab_; ++i) logprobs_[i] = static_cast<float>(logits[i] - lse);
    if (save_ != nullptr) HEARTH_RETURN_IF_ERROR(save_->write_row(logprobs_));
    if (base_ != nullptr) HEARTH_RETURN_IF_ERROR(compare(target));
    return absl::OkStatus();
  }

 private:
  absl::Status compare(std::int32_t target) {
    HEARTH_RETURN_IF_ERROR(base_->read_row(base_row_));
    KlStats& kl = *result_.kl;
    double sum = 0;
    for (std::size_t i = 0; i < n_vocab_; ++i) {
      const double b = base_row_[i];
      if (b == -std::numeric_limits<double>::infinity()) continue;  // p = 0 adds nothing
      sum += std::exp(b) * (b - static_cast<double>(logprobs_[i]));
    }
    kl.kl.push_back(sum);
    kl.base.add(-static_cast<double>(base_row_[target]));
    if (argmax(logprobs_) == argmax(base_row_)) ++kl.same_top;
    return absl::OkStatus();
  }

  // The first most likely token (ties: the lowest id).
  static std::size_t argmax(const std::vector<float>& row) {
    return static_cast<std::size_t>(std::max_element(row.begin(), row.end()) - row.begin());
  }

  std::size_t n_vocab_;
  LogitsWriter* save_;
  LogitsReader* base_;
  PerplexityResult& result_;
  std::vector<float> logprobs_, base_row_;
};

// One chunk from position 0: forward passes of up to max_chunk tokens, all
// logits kept only for passes that reach a scored row.
absl::Status run_chunk(engine::Module& module, std::span<const std::int32_t> chunk,
                       std::optional<std::int32_t> bos, RowScorer& scorer,
                       std::vector<float>& logits) {
  std::vector<std::int32_t> input(chunk.begin(), chunk.end());
  if (bos) input[0] = *bos;
  const std::size_t first = chunk.size() / 2, end = chunk.size() - 1;  // scored rows
  const std::size_t n_vocab = module.config().n_vocab;
  MemoryAllocator& temp = module.temp_allocator();
  for (std::size_t pos = 0; pos < chunk.size(); pos += module.max_chunk()) {
    const std::size_t n = std::min(module.max_chunk(), chunk.size() - pos);
    const bool scored = pos + n > first && pos < end;
    auto out =
        module.forward(std::span(input).subspan(pos, n), pos, scored ? logits.data() : nullptr);
    // forward() leaves the output projection's scratch to its caller.
    temp.reset();
    if (!out.ok()) return out.status();
    for (std::size_t r = std::max(pos, first); r < std::min(pos + n, end); ++r)
      HEARTH_RETURN_IF_ERROR(scorer.score(logits.data() + (r - pos) * n_vocab, chunk[r + 1]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChunkPlan> plan_chunks(std::size_t n_tokens, std::size_t context) {
  if (context < kMinContext)
    return absl::InvalidArgumentError(
        str_cat("a context of ", context, " scores no token; it must be at least ", kMinContext));
  if (n_tokens < 2 * context)
    return absl::InvalidArgumentError(str_cat("the text has ", n_tokens, " tokens; a context of ",
                                              context, " needs at least ", 2 * context,
                                              " (two chunks)"));
  return ChunkPlan{context, n_tokens / context};
}

double NllStats::ppl() const { return count == 0 ? 0 : std::exp(sum / count); }

double NllStats::ppl_uncertainty() const {
  if (count < 2) return 0;
  const double mean = sum / count;
  const double variance = sum_sq / count - mean * mean;
  return variance > 0 ? ppl() * std::sqrt(variance / (count - 1)) : 0;
}

double KlStats::mean() const {
  double s = 0;
  for (const double v : kl) s += v;
  return kl.empty() ? 0 : s / kl.size();
}

double KlStats::percentile(double q) const {
  if (kl.empty()) return 0;
  std::vector<double> sorted = kl;
  std::sort(sorted.begin(), sorted.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * sorted.size()));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

double KlStats::max() const { return kl.empty() ? 0 : *std::max_element(kl.begin(), kl.end()); }

double KlStats::top1_agreement() const {
  return kl.empty() ? 0 : static_cast<double>(same_top) / kl.size();
}

absl::StatusOr<PerplexityResult> evaluate(engine::Module& module,
                                          std::span<const std::int32_t> tokens,
                                          const EvaluateOptions& options) {
  HEARTH_ASSIGN_OR_RETURN(const ChunkPlan plan, plan_chunks(tokens.size(), options.context));
  if (plan.context > module.context_length())
    return absl::InvalidArgumentError(str_cat("a context of ", plan.context,
                                              " does not fit the instance's KV cache of ",
                                              module.context_length(), " positions"));
  const std::size_t n_vocab = module.config().n_vocab;
  PerplexityResult result{plan, {}, {}};
  if (options.base != nullptr) {
    HEARTH_RETURN_IF_ERROR(
        check_base(options.base->header(), n_vocab, tokens.first(plan.n_chunks * plan.context)));
    result.kl.emplace();
    result.kl->kl.reserve(plan.scored());
  }
  RowScorer scorer(n_vocab, options, result);
  std::vector<float> logits(module.max_chunk() * n_vocab);
  TempAllocatorLease lease;  // this thread's temp allocator, reset after each forward
  for (std::size_t c = 0; c < plan.n_chunks; ++c) {
    HEARTH_RETURN_IF_ERROR(run_chunk(module, tokens.subspan(c * plan.context, plan.context),
                                     options.bos, scorer, logits));
    if (options.on_chunk) options.on_chunk(c, result);
  }
  if (options.save != nullptr) HEARTH_RETURN_IF_ERROR(options.save->finish());
  return result;
}

absl::Status check_base(const LogitsHeader& base, std::size_t n_vocab,
                        std::span<const std::int32_t> tokens) {
  if (base.n_vocab != n_vocab)
    return absl::InvalidArgumentError(str_cat("it was made with a vocabulary of ", base.n_vocab,
                                              " tokens; this model's has ", n_vocab,
                                              " (another model family?)"));
  if (tokens.size() != base.tokens.size())
    return absl::InvalidArgumentError(
        str_cat("it was made from another text: it evaluated ", base.tokens.size(), " tokens (",
                base.n_chunks, " chunks of ", base.context, "), this text gives ", tokens.size()));
  const auto [here, there] = std::mismatch(tokens.begin(), tokens.end(), base.tokens.begin());
  if (here != tokens.end())
    return absl::InvalidArgumentError(str_cat("it was made from another text: token ",
                                              here - tokens.begin(), " is ", *there, " there and ",
                                              *here, " here"));
  return absl::OkStatus();
}

LogitsHeader header_for_run(const ChunkPlan& plan, std::size_t n_vocab,
                            std::span<const std::int32_t> tokens, std::string description) {
  const std::span<const std::int32_t> evaluated = tokens.first(plan.n_chunks * plan.context);
  return LogitsHeader{static_cast<std::uint32_t>(n_vocab), static_cast<std::uint32_t>(plan.context),
                      static_cast<std::uint32_t>(plan.n_chunks), std::move(description),
                      std::vector<std::int32_t>(evaluated.begin(), evaluated.end())};
}

}  // namespace hearth::quality
