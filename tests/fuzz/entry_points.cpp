// SPDX-License-Identifier: Apache-2.0
// The entry-point list as one sequence, and the dispatch of an input to an entry and a backend.
#include "entry_points.hpp"

#include <vector>

#include "entry_plan.hpp"

namespace fuzz::entry {

namespace {
const std::vector<entry>& all_entries() {
  static const std::vector<entry> all = [] {
    std::vector<entry> v;
    for (const auto group : {dense_entries, blocks_entries, requests_entries, sampling_entries, trees_entries})
      for (const entry& e : group()) v.push_back(e);
    return v;
  }();
  return all;
}
}  // namespace

void run_one(fuzz::input& in, bool sizes) {
  const std::vector<entry>& entries = all_entries();
  const entry& e = entries[in.byte() % entries.size()];
  const bool thrust = in.flag();
  if (sizes) thrust ? sizes_case<thrust_cpp>(in, e) : sizes_case<specdec::eigen>(in, e);
  else thrust ? views_case<thrust_cpp>(in, e) : views_case<specdec::eigen>(in, e);
}

}  // namespace fuzz::entry
