// KvPrefixIndex: which tokens each warm instance of a model holds in its KV
// cache, so that a request whose prompt starts like an earlier one prefills
// only what is new (prefix reuse).
//
// An instance's cache holds, at positions [0, n), the tokens its forwards ran
// there. A request takes the free instance whose cache shares the longest
// prefix with its prompt (ties: the least recently used, choose()). Before
// its first step, prepare() makes that instance hold the longest prefix any
// instance holds: its own, or rows copied from another instance (idle or
// running) that holds more, since copying int8 rows costs far less than a
// forward. At least the last prompt token always runs, so the first sampled
// token has its logits.
//
// Threads and locks: choose() runs on request threads; prepare() and wrote()
// run on the model's step-loop thread, the only thread that writes any
// instance's KV cache, so a cache and its record change together and a copy
// never races a forward. `mu_` guards the records, so choose() sees whole
// ones. Records are sized to the context at construction: no heap
// allocation afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/module.h"

namespace hearth::server {

class KvPrefixIndex {
 public:
  // `instances` (the model's, in lease-index order) outlive the index.
  KvPrefixIndex(std::vector<engine::Module*> instances, std::size_t context);

  // Among `free_instances` (not empty), the one whose cache shares the
  // longest prefix with `prompt`; ties go to the least recently used.
  std::size_t choose(std::span<const std::size_t> free_instances,
                     std::span<const std::int32_t> prompt) const;

  // On the step-loop thread, before `target` runs its first step: makes its
  // cache hold the longest prefix of `prompt` that any instance holds
  // (copying the rows it lacks) and records that prefix as its contents.
  // Returns the prompt tokens that need no forward: the prefix, at most
  // prompt.size() - 1. With reuse off the record is cleared and 0 returned.
  absl::StatusOr<std::size_t> prepare(std::size_t target, std::span<const std::int32_t> prompt,
                                      bool reuse);

  // On the step-loop thread, after a forward ran `tokens` at positions
  // [pos, pos + tokens.size()) of `target`: its cache now holds them.
  void wrote(std::size_t target, std::size_t pos, std::span<const std::int32_t> tokens);

  // Tokens `instance` holds now (tests and diagnostics).
  std::size_t cached_length(std::size_t instance) const;

 private:
  struct Record {
    std::vector<std::int32_t> tokens;  // sized to the context; [0, length) valid
    std::size_t length = 0;
    std::uint64_t last_used = 0;  // prepare() order: higher is more recent
  };
  // Tokens shared by `prompt` and record r. Requires mu_.
  std::size_t shared(const Record& r, std::span<const std::int32_t> prompt) const;

  const std::vector<engine::Module*> instances_;
  mutable std::mutex mu_;
  std::vector<Record> records_;  // guarded by mu_; one per instance
  std::uint64_t clock_ = 0;      // guarded by mu_
};

}  // namespace hearth::server
