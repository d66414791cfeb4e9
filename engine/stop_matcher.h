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

  // Adds newly decoded text and appends to `out` the text that is now safe
  // to emit; sets stopped() once a stop string has appeared (the stop string
  // and anything after it are never emitted). Makes no heap allocation once
  // the held-back buffer has grown to the longest stop string plus the
  // longest piece pushed (reserve() does that up front).
  void push(std::string_view text, std::string& out);
  std::string push(std::string_view text) {
    std::string out;
    push(text, out);
    return out;
  }
  // At the end of generation: appends whatever is still held back.
  void flush(std::string& out);
  std::string flush() {
    std::string out;
    flush(out);
    return out;
  }
  // Sizes the held-back buffer for pieces of up to `piece_bytes`.
  void reserve(std::size_t piece_bytes) { pending_.reserve(longest_ + piece_bytes); }
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::size_t longest_ = 0;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace hearth::engine
