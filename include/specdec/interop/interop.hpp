// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Umbrella header of the interop layer: the exact buffers of Medusa, EAGLE-1, SGLang and
/// TensorRT-LLM.
#pragma once

#include <specdec/interop/eagle.hpp>
#include <specdec/interop/eagle1.hpp>
#include <specdec/interop/jakiro.hpp>
#include <specdec/interop/medusa.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/interop/target_buffers.hpp>
#include <specdec/interop/trtllm.hpp>
