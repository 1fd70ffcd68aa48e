// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Umbrella header of the tree layer: the draft tree type, static trees from choice lists,
/// the EAGLE-2 dynamic builder (with SGLang's and Jakiro's forms) and Jakiro*'s two-expert proposals.
#pragma once

#include <specdec/tree/eagle2.hpp>
#include <specdec/tree/jakiro.hpp>
#include <specdec/tree/static_tree.hpp>
#include <specdec/tree/tree.hpp>
