// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Per-row and per-chunk kernels shared by every backend (host and device code).
///
/// The backends differ in how they schedule work (a loop on one core, a Thrust launch over rows or
/// over (row, chunk) pairs); the arithmetic that decides an integer output lives here, once. That is
/// what makes argmax, top-k and sampling give the same token ids on every backend: comparisons are
/// exact, and every floating-point accumulation that feeds a decision follows the canonical order
/// documented next to it, whichever backend runs it.
///
/// Input validation (NaN, +inf, negative or unnormalised probabilities, uniforms outside [0, 1)) is
/// fused into the same pass as the arithmetic and reported as a `fault`, so checking the data costs no
/// extra pass over memory. The backend turns the first fault into a specdec::invalid_argument.
///
/// The kernels are in four headers: row_simd.hpp (faults, host vectors, the maximum scan),
/// exp_kernels.hpp (exponentials, softmax and log-softmax), select_kernels.hpp (argmax, top-k) and
/// sample_kernels.hpp (canonical sampling).
#pragma once

#include <specdec/backend/detail/exp_kernels.hpp>
#include <specdec/backend/detail/row_simd.hpp>
#include <specdec/backend/detail/sample_kernels.hpp>
#include <specdec/backend/detail/select_kernels.hpp>
