// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Everything in specdec that needs no optional dependency: the core layer, the backend
/// concept, trees, masks, samplers, the peers' layouts, the drafter blocks, ADMG, the draft-length policy, n-gram drafting and the safetensors reader. Backends are included on their own: <specdec/backend/eigen.hpp> (Eigen) and
/// <specdec/backend/thrust.hpp> (Thrust).
#pragma once

#include <specdec/backend/concept.hpp>
#include <specdec/blocks/blocks.hpp>
#include <specdec/core/core.hpp>
#include <specdec/grammar/grammar.hpp>
#include <specdec/interop/interop.hpp>
#include <specdec/io/safetensors.hpp>
#include <specdec/mask/mask.hpp>
#include <specdec/policy/admg.hpp>
#include <specdec/policy/draft_length.hpp>
#include <specdec/sampling/sampling.hpp>
#include <specdec/tree/trees.hpp>
