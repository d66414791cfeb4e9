// The file `hearth-model perplexity --save-logits` writes and `--kl-base`
// reads: a run's next-token log-probabilities at every scored position, so a
// later run (another quantization, another KV cache type) can be compared
// with it token for token.
//
// Layout (native byte order: little-endian on every machine hearth runs on):
//   char[8]  "HRTHLOGP"
//   uint32   version (1)
//   uint32   n_vocab
//   uint32   context      tokens per chunk
//   uint32   n_chunks
//   uint32   description length (<= kMaxDescription), then its bytes
//   int32    tokens[n_chunks * context]   the evaluated tokens, as in the text
//   float32  logprobs[n_chunks * scored_per_chunk(context)][n_vocab]
//
// Log-probabilities are stored as float32, not llama.cpp's uint16 (a min and
// scale per row, 16 nats over 65,535 steps): rounding the base by up to
// 1.2e-4 nats would put noise of that order into every KL term, as large as
// the int8-versus-float KV difference this tool exists to measure, and a
// run compared with its own file would not give exactly 0. The cost is 4
// bytes per vocabulary entry per scored token: 2 KiB a token for a 512-token
// vocabulary, 125 KiB for Llama 2's 32,000 (about 31 MiB per 512-token chunk).
//
// The writer writes to FILE.partial and renames it when every row is in, so
// a run that fails leaves no file a reader could mistake for a whole one.
// The reader checks the magic, the version, that the file's size is exactly
// what its header describes, and that every row is a distribution (finite
// or -inf values whose exponentials sum to 1), naming the file in each
// refusal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hearth::quality {

// Rows scored in a chunk of `context` tokens: positions context/2 .. context-2.
constexpr std::size_t scored_per_chunk(std::size_t context) { return context - 1 - context / 2; }

// The smallest context that scores at least one token per chunk.
inline constexpr std::size_t kMinContext = 4;

inline constexpr std::size_t kMaxDescription = 4096;

struct LogitsHeader {
  std::uint32_t n_vocab = 0;
  std::uint32_t context = 0;
  std::uint32_t n_chunks = 0;
  std::string description;           // what made it: model file, weights, KV cache type
  std::vector<std::int32_t> tokens;  // n_chunks * context
  std::size_t rows() const { return std::size_t{n_chunks} * scored_per_chunk(context); }
};

class LogitsWriter {
 public:
  static absl::StatusOr<std::unique_ptr<LogitsWriter>> create(const std::string& path,
                                                              const LogitsHeader& header);
  ~LogitsWriter();  // without finish(): the partial file is removed
  LogitsWriter(const LogitsWriter&) = delete;
  LogitsWriter& operator=(const LogitsWriter&) = delete;

  // The next scored position's log-probabilities (n_vocab of them).
  absl::Status write_row(std::span<const float> logprobs);
  // Every row written: close and move the file into place.
  absl::Status finish();

 private:
  LogitsWriter(std::string path, std::FILE* file, std::size_t n_vocab, std::size_t rows);
  std::string path_;
  std::FILE* file_;
  std::size_t n_vocab_, rows_, written_ = 0;
};

class LogitsReader {
 public:
  static absl::StatusOr<std::unique_ptr<LogitsReader>> open(const std::string& path);
  ~LogitsReader();
  LogitsReader(const LogitsReader&) = delete;
  LogitsReader& operator=(const LogitsReader&) = delete;

  const LogitsHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  // The next row into `out` (n_vocab floats); InvalidArgument when the row
  // is not a distribution of log-probabilities.
  absl::Status read_row(std::span<float> out);

 private:
  LogitsReader(std::string path, std::FILE* file, LogitsHeader header);
  std::string path_;
  std::FILE* file_;
  LogitsHeader header_;
  std::size_t read_ = 0;
};

}  // namespace hearth::quality
