// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The single source of truth for specdec's version; CMake parses these three macros.
#pragma once

#define SPECDEC_VERSION_MAJOR 0
#define SPECDEC_VERSION_MINOR 1
#define SPECDEC_VERSION_PATCH 0

/// The version as one integer, MMmmpp (0.1.0 -> 100).
#define SPECDEC_VERSION (SPECDEC_VERSION_MAJOR * 10000 + SPECDEC_VERSION_MINOR * 100 + SPECDEC_VERSION_PATCH)

/// True when this specdec is at least version x.y.z.
#define SPECDEC_VERSION_AT_LEAST(x, y, z) (SPECDEC_VERSION >= ((x) * 10000 + (y) * 100 + (z)))
