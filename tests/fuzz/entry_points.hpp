// SPDX-License-Identifier: Apache-2.0
// The public entry points that take views or sizes, as one list that fuzz_views and fuzz_sizes both
// run (the harness is entry_plan.hpp; the entries are grouped by layer in entries_*.hpp, each group's
// list in its entries_*.cpp, compiled once for both harnesses). A new entry point is one struct in an
// entries_*.hpp and one line in its list.
#pragma once

#include "fuzz_input.hpp"

namespace fuzz::entry {

/// One input of fuzz_views (`sizes` false) or fuzz_sizes: an entry of the list, a backend, then the
/// layouts (entry_points.cpp).
void run_one(fuzz::input& in, bool sizes);

}  // namespace fuzz::entry
