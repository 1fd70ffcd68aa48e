// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief SuffixDecoding (Oliaro et al., arXiv 2411.04975; Snowflake's Arctic Inference, vLLM's
/// `suffix` method): model-free drafts from suffix trees over the request's own tokens and over a
/// cache of earlier responses shared across requests, continuations ranked by how often they
/// followed the match, the draft growing with the match length.
///
/// - `suffix_tree<Token>`: every suffix of every stored sequence, cut to `max_depth` tokens, with
///   per-node occurrence counts, path compression and siblings kept in count order; append is
///   O(max_depth) node steps per token whatever has been stored, remove is O(length x max_depth).
/// - `suffix_cache<Token, RequestId>`: one tree per active request (prompt and response so far) and
///   one global tree of responses, evicted whole, oldest first, under a request and a token bound.
/// - `suffix_draft_tree`: a draft in specdec's tree form (tokens, parents, depths), for every verifier,
///   mask layout and engine adapter.
///
/// Drafts are Arctic Inference 0.3.0's `SuffixTree::speculate` / `SuffixDecodingCache.speculate` bit
/// for bit (token ids, parents, float32 probabilities, score, match length): the same sibling order
/// (history-dependent ties), the same float rounding and libstdc++'s heap tie order in tree mode;
/// tests/test_suffix.cpp replays cases recorded from it (scripts/suffix_oracle.py). Host memory,
/// no backend. This header includes both parts.
#pragma once

#include <specdec/tree/suffix_cache.hpp>
#include <specdec/tree/suffix_tree.hpp>
