// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Umbrella header of the tree layer: the draft tree type, static trees from choice lists,
/// the drafting protocol and the library's drafters, the EAGLE-2 dynamic builder (with SGLang's and Jakiro's forms), Jakiro*'s two-expert proposals and
/// prompt-lookup (n-gram) drafts and SuffixDecoding's suffix trees.
#pragma once

#include <specdec/tree/drafter.hpp>
#include <specdec/tree/block_drafter.hpp>
#include <specdec/tree/drafters.hpp>
#include <specdec/tree/eagle2.hpp>
#include <specdec/tree/eagle2_batch.hpp>
#include <specdec/tree/jakiro.hpp>
#include <specdec/tree/ngram.hpp>
#include <specdec/tree/static_tree.hpp>
#include <specdec/tree/suffix.hpp>
#include <specdec/tree/tree.hpp>
