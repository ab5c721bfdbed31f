// cuda_runtime.h of the CPU emulation build (LOOM_CUDA=EMULATE): the toolkit's host API and
// types; in device code (.cu files, LOOM_EMU_DEVICE_CODE) also the device side the emulator
// provides: qualifiers, threadIdx and friends, barriers, warp intrinsics, launches.
#pragma once
#ifdef LOOM_EMU_DEVICE_CODE
#include "loom_emu/device.h"
#include "loom_emu/launch.h"
#else
#include "loom_emu/device_api.h"
#endif
