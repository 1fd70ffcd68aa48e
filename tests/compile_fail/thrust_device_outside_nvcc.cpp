// SPDX-License-Identifier: Apache-2.0
// Must not compile: a build configured with SPECDEC_THRUST_DEVICE_SYSTEM=CUDA names thrust_backend<> (the
// configured device system) in a translation unit g++ compiles, where CUDA cannot run. It used to
// become thrust_backend<cpp> here silently while .cu files got thrust_backend<cuda>.
#include <specdec/backend/thrust.hpp>

int main() {
  specdec::thrust_backend<> backend;
  (void)backend;
}
