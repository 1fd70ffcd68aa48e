// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Umbrella header of the vocabulary side of structured output: token bitmasks in xgrammar's
/// layout and their application to logits (token_bitmask.hpp), and a grammar matcher filling a draft
/// tree's bitmask rows and pruning what they forbid (tree_grammar.hpp). Verification under the masks
/// lives with the verifiers (specdec/sampling/bitmask.hpp, `speculative_rows::target_bitmask`).
#pragma once

#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/grammar/tree_grammar.hpp>
