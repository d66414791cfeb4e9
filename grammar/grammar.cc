#include "grammar/grammar.h"

#include <algorithm>

#include "grammar/token_mask.h"

namespace hearth::grammar {

Grammar::Grammar() : mask_cache_(std::make_unique<MaskCache>()) {}
Grammar::~Grammar() = default;

bool Grammar::class_holds(std::uint32_t index, char32_t c) const {
  return class_meets(index, c, c);
}

bool Grammar::class_meets(std::uint32_t index, char32_t lo, char32_t hi) const {
  const std::vector<CharRange>& ranges = classes_[index];
  // The first range that ends at or after lo: it meets [lo, hi] if it starts by hi.
  auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                             [](const CharRange& r, char32_t v) { return r.hi < v; });
  return it != ranges.end() && it->lo <= hi;
}

}  // namespace hearth::grammar
