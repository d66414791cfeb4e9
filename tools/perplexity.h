// Perplexity of a model over a text, and the KL divergence of its
// next-token distributions from a base run's: the quality measure behind
// `hearth-model perplexity` (issue #16), following llama.cpp's perplexity
// tool so figures are comparable in kind.
//
// Method: the text is tokenized by the model's rule (BOS first for llama
// vocabularies) and cut into chunks of `context` tokens; a chunk's first
// token is replaced by BOS when the model adds one, so every chunk starts as
// a fresh prompt does. Each chunk runs from position 0, so nothing of an
// earlier chunk is visible to it (the KV rows it leaves are overwritten
// before they could be read: attention is causal). Only the second half of a
// chunk is scored, so every scored token has at least context/2 tokens
// before it: the logits row at position j (context/2 <= j < context - 1)
// predicts token j + 1, and its negative log-likelihood is
// -log softmax(row)[token]. PPL = exp(mean NLL); its uncertainty is
// PPL * the standard error of the mean NLL.
//
// The forward pass is hearth's own engine::Module (the KV cache type the
// caller chose, the process's kernel thread pool), the path the server runs.
//
// Threads: one caller; the Module's kernels fan out to its thread pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/module.h"
#include "tools/logits_file.h"

namespace hearth::quality {

// How a text of n tokens is cut and which rows are scored.
struct ChunkPlan {
  std::size_t context = 0;   // tokens per chunk
  std::size_t n_chunks = 0;  // floor(n_tokens / context); the tail is not evaluated
  std::size_t first_scored() const { return context / 2; }
  std::size_t scored_per_chunk() const { return quality::scored_per_chunk(context); }
  std::size_t scored() const { return n_chunks * scored_per_chunk(); }
};

// InvalidArgument when context < kMinContext, or when the text is shorter
// than two chunks (one chunk's figure would rest on context/2 tokens of a
// single passage); the message says how many tokens are needed.
absl::StatusOr<ChunkPlan> plan_chunks(std::size_t n_tokens, std::size_t context);

// Running mean of the negative log-likelihoods.
struct NllStats {
  std::size_t count = 0;
  double sum = 0, sum_sq = 0;
  void add(double nll) {
    ++count;
    sum += nll;
    sum_sq += nll * nll;
  }
  double ppl() const;
  // PPL * standard error of the mean NLL (0 below two tokens).
  double ppl_uncertainty() const;
};

// The current run against a base run's saved log-probabilities.
struct KlStats {
  std::vector<double> kl;    // KL(base || current) per scored token, in text order
  std::size_t same_top = 0;  // tokens whose most likely token is the same in both
  NllStats base;             // the base run's NLL of the same tokens
  double mean() const;
  // Nearest-rank percentile, q in (0, 1].
  double percentile(double q) const;
  double max() const;
  double top1_agreement() const;  // in [0, 1]
};

struct PerplexityResult {
  ChunkPlan plan;
  NllStats nll;
  std::optional<KlStats> kl;  // with a base
};

struct EvaluateOptions {
  std::size_t context = 512;
  // With a value: the token that starts every chunk (the model's BOS when
  // it adds one).
  std::optional<std::int32_t> bos;
  // Where to save this run's log-probabilities (nullptr: not saved). Its
  // header must describe this run (LogitsHeader::for_run).
  LogitsWriter* save = nullptr;
  // A base run to compare with (nullptr: none), already checked against this
  // text and vocabulary (check_base).
  LogitsReader* base = nullptr;
  // Called after each chunk with its index and the figures so far.
  std::function<void(std::size_t chunk, const PerplexityResult& so_far)> on_chunk;
};

// Evaluates `tokens` (the whole tokenized text) on `module`, whose context
// must hold options.context positions.
absl::StatusOr<PerplexityResult> evaluate(engine::Module& module,
                                          std::span<const std::int32_t> tokens,
                                          const EvaluateOptions& options);

// OK when `base` was made from these tokens with a vocabulary of n_vocab;
// otherwise InvalidArgument saying what differs (the vocabulary size, the
// number of tokens, or the first token that differs).
absl::Status check_base(const LogitsHeader& base, std::size_t n_vocab,
                        std::span<const std::int32_t> tokens);

// The header of a run's saved log-probabilities: the tokens its chunks
// evaluate (as in the text, before BOS replaces each chunk's first).
LogitsHeader header_for_run(const ChunkPlan& plan, std::size_t n_vocab,
                            std::span<const std::int32_t> tokens, std::string description);

}  // namespace hearth::quality
