// Holds back generated text that might be the start of a stop string, so a
// client never sees part of a stop string, and finds the first full match.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hearth::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds newly decoded text. Returns the text that is now safe to emit; sets
  // stopped() once a stop string has appeared (the stop string and anything
  // after it are never returned).
  std::string push(std::string_view text);
  // At the end of generation: whatever is still held back.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::size_t longest_ = 0;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace hearth::engine
