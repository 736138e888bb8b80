// The one way EOS lists are merged (the model file's, generation_config.json's, the tokenizer's,
// the workers'): each id once, in the order first seen.
#pragma once

#include <algorithm>
#include <vector>

namespace astr {

// Appends `id` to `ids` unless it is there already.
template <typename T, typename Id>
void AddTokenId(std::vector<T>* ids, Id id) {
  if (std::find(ids->begin(), ids->end(), static_cast<T>(id)) == ids->end()) {
    ids->push_back(static_cast<T>(id));
  }
}

// Appends each id of `more` that `ids` does not hold yet, in order.
template <typename T, typename Range>
void MergeTokenIds(std::vector<T>* ids, const Range& more) {
  for (const auto& id : more) AddTokenId(ids, id);
}

}  // namespace astr
