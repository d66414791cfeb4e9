#include "engine/stop_matcher.h"

#include <algorithm>

namespace hearth::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
  for (const auto& s : stops_) longest_ = std::max(longest_, s.size());
}

void StopMatcher::push(std::string_view text, std::string& out) {
  if (stopped_) return;
  if (stops_.empty()) {
    out.append(text);
    return;
  }
  // pending_ holds only text that could still begin a match (shorter than the
  // longest stop string), so searching all of it stays cheap.
  pending_.append(text);
  std::size_t first = std::string::npos;
  for (const auto& s : stops_) {
    const std::size_t at = pending_.find(s);
    if (at < first) first = at;
  }
  if (first != std::string::npos) {
    stopped_ = true;
    out.append(pending_, 0, first);
    pending_.clear();
    return;
  }
  // Keep the longest suffix that is a proper prefix of some stop string.
  std::size_t hold = 0;
  for (const auto& s : stops_) {
    for (std::size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  out.append(pending_, 0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
}

void StopMatcher::flush(std::string& out) {
  if (!stopped_) out.append(pending_);
  pending_.clear();
}

}  // namespace hearth::engine
