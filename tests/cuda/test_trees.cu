// SPDX-License-Identifier: Apache-2.0
// The trees suite built by nvcc: adds specdec::thrust_backend<thrust_system::cuda> to its backends.
#include "../test_trees.cpp"
