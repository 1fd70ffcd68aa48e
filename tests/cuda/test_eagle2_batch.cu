// SPDX-License-Identifier: Apache-2.0
// The device-resident EAGLE-2 build suite built by nvcc: adds specdec::thrust_backend<thrust_system::cuda>.
#include "../test_eagle2_batch.cpp"
