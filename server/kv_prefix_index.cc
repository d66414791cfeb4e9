#include "server/kv_prefix_index.h"

#include <algorithm>

#include "base/status_macros.h"

namespace hearth::server {

KvPrefixIndex::KvPrefixIndex(std::vector<engine::Module*> instances, std::size_t context)
    : instances_(std::move(instances)), records_(instances_.size()) {
  for (Record& r : records_) r.tokens.resize(context);
}

std::size_t KvPrefixIndex::shared(const Record& r, std::span<const std::int32_t> prompt) const {
  const std::size_t n = std::min(r.length, prompt.size());
  return static_cast<std::size_t>(std::mismatch(prompt.begin(),
                                                prompt.begin() + static_cast<std::ptrdiff_t>(n),
                                                r.tokens.begin())
                                      .first -
                                  prompt.begin());
}

std::size_t KvPrefixIndex::choose(std::span<const std::size_t> free_instances,
                                  std::span<const std::int32_t> prompt) const {
  std::lock_guard<std::mutex> lock(mu_);
  // From the back: among equals, the instance the free list would hand out.
  std::size_t best = free_instances.back(), best_shared = shared(records_[best], prompt);
  for (auto it = free_instances.rbegin(); it != free_instances.rend(); ++it) {
    const std::size_t i = *it;
    const std::size_t n = shared(records_[i], prompt);
    if (n > best_shared || (n == best_shared && records_[i].last_used < records_[best].last_used)) {
      best = i;
      best_shared = n;
    }
  }
  return best;
}

absl::StatusOr<std::size_t> KvPrefixIndex::prepare(std::size_t target,
                                                   std::span<const std::int32_t> prompt,
                                                   bool reuse) {
  std::size_t own = 0, best = 0, source = target;
  {
    std::lock_guard<std::mutex> lock(mu_);
    records_[target].last_used = ++clock_;
    if (!reuse || prompt.empty()) {
      records_[target].length = 0;
      return 0;
    }
    own = best = shared(records_[target], prompt);
    for (std::size_t i = 0; i < records_.size(); ++i) {
      const std::size_t n = shared(records_[i], prompt);
      if (n > best) {
        best = n;
        source = i;
      }
    }
  }
  const std::size_t reused = std::min(best, prompt.size() - 1);
  // Only this thread writes caches and records: the source's rows below
  // `reused` stay as recorded while they are copied, without the lock.
  if (source != target && reused > own) {
    absl::Status copied = instances_[target]->copy_kv_from(*instances_[source], own, reused);
    if (!copied.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      records_[target].length = own;
      return copied;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  Record& r = records_[target];
  std::copy(prompt.begin() + static_cast<std::ptrdiff_t>(own),
            prompt.begin() + static_cast<std::ptrdiff_t>(std::max(own, reused)),
            r.tokens.begin() + static_cast<std::ptrdiff_t>(own));
  r.length = reused;
  return reused;
}

void KvPrefixIndex::wrote(std::size_t target, std::size_t pos,
                          std::span<const std::int32_t> tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  Record& r = records_[target];
  if (pos > r.length || pos + tokens.size() > r.tokens.size()) {  // not contiguous: forget
    r.length = 0;
    return;
  }
  std::copy(tokens.begin(), tokens.end(), r.tokens.begin() + static_cast<std::ptrdiff_t>(pos));
  r.length = pos + tokens.size();
}

std::size_t KvPrefixIndex::cached_length(std::size_t instance) const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_[instance].length;
}

}  // namespace hearth::server
