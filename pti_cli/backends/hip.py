"""The kernels backend on AMD GPUs: kernels/pti_kernel.hip through hip-python.

Same structure as cuda.py: hiprtc compiles the source to a code object for the
device's gfx target (compile.py, cached), the module is loaded once when the
backend is made (before any graph capture), and kernels are launched with
hipModuleLaunchKernel on torch's current stream with torch tensors' pointers.

On AMD the portable kernel (`pti_mmg_*`, shared-memory reduction, no warp
intrinsics, so the 64-wide wavefront needs nothing special) runs; the
tensor-core kernels are NVIDIA-only.  NOT RUN ON AMD HARDWARE: no AMD GPU was
available to this project (docs/gpu-tests.md says what was checked).
"""

from __future__ import annotations

import ctypes

import torch

from ..errors import PtiError
from .cuda import ACT_TAGS, THREADS, KernelBackend


def _hip_check(result, what: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise PtiError(f"HIP: {what} failed: {err}")
    return rest[0] if len(rest) == 1 else (rest or None)


class HipBackend(KernelBackend):
    name = "hip"
    kind = "hip"

    def _load_module(self) -> None:
        if getattr(torch.version, "hip", None) is None:
            raise PtiError("the hip backend needs a ROCm build of torch")
        try:
            from hip import hip
        except ImportError:
            raise PtiError("the hip backend needs hip-python: pip install hip-python (matching your ROCm)") from None
        from .compile import cached_binary

        self._hip = hip
        self.generic = True
        self.arch = torch.cuda.get_device_properties(self.device).gcnArchName.split(":")[0]
        with torch.cuda.device(self.device):
            torch.empty(1, device=self.device)   # torch's context is current from here on
            self.compiled = cached_binary("hip", self.arch)
            self.module = _hip_check(hip.hipModuleLoadData(self.compiled.binary), "hipModuleLoadData")
            names = ["pti_stream_read"] + [self.kernel_name(t, 1, a, o) for t in (1, 2)
                                           for a in ACT_TAGS for o in (a, torch.float32)]
            for n in names:
                self.funcs[n] = _hip_check(hip.hipModuleGetFunction(self.module, n.encode()),
                                           f"hipModuleGetFunction {n}")

    def launch(self, packs, xs, ys, name: str, epi=None) -> None:
        f = self.kernel(name)
        grid, vals, types = self.launch_args(name, packs, xs, ys, epi)
        stream = torch.cuda.current_stream(self.device).cuda_stream   # read now: capture uses a side stream
        extra = tuple(t(v) for v, t in zip(vals, types))
        _hip_check(self._hip.hipModuleLaunchKernel(f, grid, 1, 1, THREADS, 1, 1,
                                                   sharedMemBytes=0, stream=stream, kernelParams=None,
                                                   extra=extra), f"launch {name}")

    def stream_read(self, buf: torch.Tensor, blocks: int) -> torch.Tensor:
        out = torch.empty(blocks * THREADS, dtype=torch.int32, device=self.device)
        n16 = buf.numel() * buf.element_size() // 16
        stream = torch.cuda.current_stream(self.device).cuda_stream
        extra = (ctypes.c_void_p(buf.data_ptr()), ctypes.c_uint64(n16), ctypes.c_void_p(out.data_ptr()))
        _hip_check(self._hip.hipModuleLaunchKernel(self.funcs["pti_stream_read"], blocks, 1, 1, THREADS, 1, 1,
                                                   sharedMemBytes=0, stream=stream, kernelParams=None,
                                                   extra=extra), "launch pti_stream_read")
        return out
