// SPDX-License-Identifier: Apache-2.0
// The conformance suite built by nvcc: adds specdec::thrust_backend<thrust_system::cuda> to the backends.
#include "../test_backend_conformance.cpp"
