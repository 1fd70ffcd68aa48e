// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief All drafter blocks: Llama layer pieces, EAGLE, EAGLE-3, MTP, DFlash, Jakiro MoE, Mixture of Attentions,
/// Amphista.
/// They need a `dense_backend`; see docs/blocks.md.
#pragma once

#include <specdec/blocks/amphista.hpp>
#include <specdec/blocks/dflash.hpp>
#include <specdec/blocks/eagle.hpp>
#include <specdec/blocks/eagle3.hpp>
#include <specdec/blocks/layers.hpp>
#include <specdec/blocks/moa.hpp>
#include <specdec/blocks/moe.hpp>
#include <specdec/blocks/mtp.hpp>
