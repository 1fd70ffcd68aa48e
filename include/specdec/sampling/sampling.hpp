// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Umbrella header of the sampling layer: distribution processing, greedy (also under token bitmasks),
/// penalties on tree rows, logprobs of emitted tokens, stochastic (lossless and lenient), SGLang's coin rule and typical acceptance.
#pragma once

#include <specdec/sampling/batch.hpp>
#include <specdec/sampling/batch_penalties.hpp>
#include <specdec/sampling/bitmask.hpp>
#include <specdec/sampling/distribution.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/sampling/lenient.hpp>
#include <specdec/sampling/logprobs.hpp>
#include <specdec/sampling/penalties.hpp>
#include <specdec/sampling/randomness.hpp>
#include <specdec/sampling/speculative.hpp>
#include <specdec/sampling/tree_coin.hpp>
#include <specdec/sampling/typical.hpp>
