#include "tools/logits_file.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "base/status_macros.h"
#include "base/str_cat.h"

namespace hearth::quality {
namespace {

constexpr char kMagic[8] = {'H', 'R', 'T', 'H', 'L', 'O', 'G', 'P'};
constexpr std::uint32_t kVersion = 1;
// magic, version, n_vocab, context, n_chunks, description length
constexpr std::size_t kFixedHeaderBytes = 8 + 5 * 4;

// Exponentials of a stored row may sum to 1 within float rounding of each
// log-probability; a row off by more than this was not written by a run.
constexpr double kSumTolerance = 1e-3;

std::string in_quotes(const std::string& path) { return str_cat("'", path, "'"); }

bool write_u32(std::FILE* f, std::uint32_t v) { return std::fwrite(&v, 4, 1, f) == 1; }

bool read_u32(std::FILE* f, std::uint32_t* v) { return std::fread(v, 4, 1, f) == 1; }

// Bytes a whole file with this header holds, from its counts alone (in 128
// bits: a corrupt header's 32-bit counts can multiply past 64).
unsigned __int128 expected_size(const LogitsHeader& h) {
  using U = unsigned __int128;
  const U tokens = U{h.n_chunks} * h.context;
  const U rows = U{h.n_chunks} * scored_per_chunk(h.context);
  return kFixedHeaderBytes + h.description.size() + 4 * tokens + 4 * rows * h.n_vocab;
}

absl::Status check_dimensions(const std::string& path, const LogitsHeader& h,
                              std::uint32_t description_bytes) {
  if (h.n_vocab == 0 || h.context < kMinContext || h.n_chunks == 0)
    return absl::InvalidArgumentError(str_cat(in_quotes(path), ": corrupt header (vocabulary ",
                                              h.n_vocab, ", context ", h.context, ", chunks ",
                                              h.n_chunks, ")"));
  if (description_bytes > kMaxDescription)
    return absl::InvalidArgumentError(str_cat(
        in_quotes(path), ": corrupt header (a description of ", description_bytes, " bytes)"));
  return absl::OkStatus();
}

// The header's fixed fields and description.
absl::StatusOr<LogitsHeader> read_header(const std::string& path, std::FILE* f) {
  char magic[8];
  if (std::fread(magic, 1, 8, f) != 8 || std::memcmp(magic, kMagic, 8) != 0)
    return absl::InvalidArgumentError(str_cat(
        in_quotes(path), " is not a logits file written by hearth-model perplexity --save-logits"));
  std::uint32_t version = 0, description_bytes = 0;
  LogitsHeader h;
  if (!read_u32(f, &version) || !read_u32(f, &h.n_vocab) || !read_u32(f, &h.context) ||
      !read_u32(f, &h.n_chunks) || !read_u32(f, &description_bytes))
    return absl::InvalidArgumentError(str_cat(in_quotes(path), " is truncated inside its header"));
  if (version != kVersion)
    return absl::InvalidArgumentError(str_cat(in_quotes(path), " has format version ", version,
                                              "; this hearth reads version ", kVersion));
  HEARTH_RETURN_IF_ERROR(check_dimensions(path, h, description_bytes));
  h.description.resize(description_bytes);
  if (std::fread(h.description.data(), 1, description_bytes, f) != description_bytes)
    return absl::InvalidArgumentError(str_cat(in_quotes(path), " is truncated inside its header"));
  return h;
}

// The file's size against what its header describes, before any row is read.
absl::Status check_size(const std::string& path, const LogitsHeader& h) {
  std::error_code ec;
  const std::uintmax_t actual = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(str_cat("cannot read the size of ", in_quotes(path)));
  const unsigned __int128 needed = expected_size(h);
  if (needed > actual)
    return absl::InvalidArgumentError(
        str_cat(in_quotes(path), " is truncated: ", actual, " bytes, but its header (vocabulary ",
                h.n_vocab, ", ", h.n_chunks, " chunks of ", h.context, " tokens) needs ",
                needed >> 64 ? std::string("more than 2^64")
                             : str_cat(static_cast<std::uint64_t>(needed))));
  const auto expected = static_cast<std::uintmax_t>(needed);
  if (actual > expected)
    return absl::InvalidArgumentError(str_cat(in_quotes(path), " has ", actual - expected,
                                              " bytes more than its header describes (", expected,
                                              ")"));
  return absl::OkStatus();
}

// A row of log-probabilities: no NaN or +inf, nothing above 0 beyond float
// rounding, exponentials summing to 1.
bool is_distribution(std::span<const float> row) {
  double sum = 0;
  for (const float v : row) {
    if (std::isnan(v) || v > static_cast<float>(kSumTolerance)) return false;
    sum += std::exp(static_cast<double>(v));
  }
  return std::fabs(sum - 1.0) <= kSumTolerance;
}

}  // namespace

// ---------------------------------------------------------------------------
// LogitsWriter

LogitsWriter::LogitsWriter(std::string path, std::FILE* file, std::size_t n_vocab, std::size_t rows)
    : path_(std::move(path)), file_(file), n_vocab_(n_vocab), rows_(rows) {}

LogitsWriter::~LogitsWriter() {
  if (file_ == nullptr) return;
  std::fclose(file_);
  std::error_code ec;
  std::filesystem::remove(path_ + ".partial", ec);
}

absl::StatusOr<std::unique_ptr<LogitsWriter>> LogitsWriter::create(const std::string& path,
                                                                   const LogitsHeader& header) {
  if (header.description.size() > kMaxDescription || header.n_vocab == 0 ||
      header.tokens.size() != std::size_t{header.n_chunks} * header.context)
    return absl::InternalError("LogitsWriter: inconsistent header");
  // The run's end renames the file over `path`: anything there but a file
  // (a directory, a device, a link) is refused now, not replaced or found
  // out after the whole run.
  std::error_code ec;
  const std::filesystem::file_status target = std::filesystem::symlink_status(path, ec);
  if (std::filesystem::exists(target) && !std::filesystem::is_regular_file(target))
    return absl::InvalidArgumentError(
        str_cat(in_quotes(path), " exists and is not a regular file; refusing to replace it"));
  const std::string partial = path + ".partial";
  std::FILE* f = std::fopen(partial.c_str(), "wb");
  if (f == nullptr) return absl::NotFoundError(str_cat("cannot create ", in_quotes(partial)));
  std::unique_ptr<LogitsWriter> w(new LogitsWriter(path, f, header.n_vocab, header.rows()));
  const bool ok =
      std::fwrite(kMagic, 1, 8, f) == 8 && write_u32(f, kVersion) && write_u32(f, header.n_vocab) &&
      write_u32(f, header.context) && write_u32(f, header.n_chunks) &&
      write_u32(f, static_cast<std::uint32_t>(header.description.size())) &&
      std::fwrite(header.description.data(), 1, header.description.size(), f) ==
          header.description.size() &&
      std::fwrite(header.tokens.data(), 4, header.tokens.size(), f) == header.tokens.size();
  if (!ok) return absl::DataLossError(str_cat("cannot write ", in_quotes(partial)));
  return w;
}

absl::Status LogitsWriter::write_row(std::span<const float> logprobs) {
  if (logprobs.size() != n_vocab_ || written_ == rows_ || file_ == nullptr)
    return absl::InternalError(str_cat("LogitsWriter: row ", written_, " of ", rows_, ", ",
                                       logprobs.size(), " values for a vocabulary of ", n_vocab_));
  if (std::fwrite(logprobs.data(), 4, n_vocab_, file_) != n_vocab_)
    return absl::DataLossError(str_cat("cannot write ", in_quotes(path_ + ".partial")));
  ++written_;
  return absl::OkStatus();
}

absl::Status LogitsWriter::finish() {
  if (written_ != rows_)
    return absl::InternalError(str_cat("LogitsWriter: ", written_, " of ", rows_, " rows written"));
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  const std::string partial = path_ + ".partial";
  std::error_code ec;
  if (closed) std::filesystem::rename(partial, path_, ec);
  if (!closed || ec) {
    std::filesystem::remove(partial, ec);
    return absl::DataLossError(str_cat("cannot write ", in_quotes(path_)));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// LogitsReader

LogitsReader::LogitsReader(std::string path, std::FILE* file, LogitsHeader header)
    : path_(std::move(path)), file_(file), header_(std::move(header)) {}

LogitsReader::~LogitsReader() { std::fclose(file_); }

absl::StatusOr<std::unique_ptr<LogitsReader>> LogitsReader::open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(str_cat("cannot read ", in_quotes(path)));
  // Owns `f` from here on, whatever happens.
  std::unique_ptr<LogitsReader> r(new LogitsReader(path, f, {}));
  HEARTH_ASSIGN_OR_RETURN(r->header_, read_header(path, f));
  HEARTH_RETURN_IF_ERROR(check_size(path, r->header_));
  std::vector<std::int32_t>& tokens = r->header_.tokens;
  tokens.resize(std::size_t{r->header_.n_chunks} * r->header_.context);  // the file holds them
  if (std::fread(tokens.data(), 4, tokens.size(), f) != tokens.size())
    return absl::InvalidArgumentError(str_cat(in_quotes(path), " is truncated inside its tokens"));
  return r;
}

absl::Status LogitsReader::read_row(std::span<float> out) {
  if (out.size() != header_.n_vocab || read_ == header_.rows())
    return absl::InternalError(str_cat("LogitsReader: row ", read_, " of ", header_.rows()));
  if (std::fread(out.data(), 4, out.size(), file_) != out.size())
    return absl::InvalidArgumentError(
        str_cat(in_quotes(path_), " is truncated at scored token ", read_));
  if (!is_distribution(out))
    return absl::InvalidArgumentError(
        str_cat(in_quotes(path_), ": scored token ", read_,
                " does not hold log-probabilities that sum to 1 (the file is corrupt)"));
  ++read_;
  return absl::OkStatus();
}

}  // namespace hearth::quality
