// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Umbrella header of the mask layer.
#pragma once

#include <specdec/mask/tree_mask.hpp>
