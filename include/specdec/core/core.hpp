// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Umbrella header of the core layer (standard library only).
#pragma once

#include <specdec/config.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/device_array.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/half.hpp>
#include <specdec/core/memory_space.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/workspace.hpp>
#include <specdec/version.hpp>
