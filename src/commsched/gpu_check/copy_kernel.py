"""A communication-like kernel on exactly k blocks, for the contention probe where two NCCL ranks
cannot share the GPU (NCCL older than 2.30): it streams a buffer from one place in GPU memory to
another, a grid-stride loop over 16-byte words repeated ``passes`` times, as an NCCL channel streams
its chunks, on ``k`` blocks of ``threads`` threads, on the stream it is given.

It is hand-written PTX loaded through the CUDA driver (``cuModuleLoadData`` JIT-compiles PTX for
the GPU; ``cuModuleGetFunction``, ``cuLaunchKernel``; CUDA Driver API reference, "Module
Management" and "Execution Control"), called with ctypes from ``libcuda.so.1``, which every machine
with an NVIDIA driver has: no compiler, nvcc or NVRTC needed. The PTX (ISA 7.0, sm_70 and newer)
was checked with ``ptxas -arch=sm_90`` and ``-arch=sm_80``, and ran on an H200 (make gpu-check,
docs/gpu.md).
"""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["CopyKernel", "PTX"]

KERNEL_NAME = "commsched_copy"

PTX = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry commsched_copy(
    .param .u64 dst_param,
    .param .u64 src_param,
    .param .u64 n_param,
    .param .u32 passes_param
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<12>;
    .reg .f32 %f<5>;

    ld.param.u64 %rd1, [dst_param];
    ld.param.u64 %rd2, [src_param];
    ld.param.u64 %rd3, [n_param];
    ld.param.u32 %r1, [passes_param];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, %nctaid.x;
    mad.lo.s32 %r6, %r2, %r3, %r4;
    mul.lo.s32 %r7, %r5, %r3;
    cvt.u64.u32 %rd4, %r6;
    cvt.u64.u32 %rd5, %r7;
    mov.u32 %r2, 0;
PASS:
    setp.ge.u32 %p1, %r2, %r1;
    @%p1 bra DONE;
    mov.u64 %rd6, %rd4;
ELEM:
    setp.ge.u64 %p2, %rd6, %rd3;
    @%p2 bra NEXT;
    shl.b64 %rd7, %rd6, 4;
    add.s64 %rd8, %rd2, %rd7;
    add.s64 %rd9, %rd1, %rd7;
    ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd8];
    st.global.v4.f32 [%rd9], {%f1, %f2, %f3, %f4};
    add.s64 %rd6, %rd6, %rd5;
    bra ELEM;
NEXT:
    add.u32 %r2, %r2, 1;
    bra PASS;
DONE:
    ret;
}
"""


def _check(lib: Any, result: int, what: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        lib.cuGetErrorString(result, ctypes.byref(name))
        raise RuntimeError(f"{what} failed: CUDA driver error {result} ({(name.value or b'?').decode()})")


class CopyKernel:
    """The PTX above, loaded into the current CUDA context (torch's: call after torch has used the GPU
    on this thread)."""

    def __init__(self) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuModuleLoadData.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
        lib.cuModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]
        lib.cuLaunchKernel.argtypes = [
            ctypes.c_void_p, *([ctypes.c_uint] * 7), ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p),
        ]
        lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self._lib = lib
        self._module = ctypes.c_void_p()
        _check(lib, lib.cuModuleLoadData(ctypes.byref(self._module), PTX.encode() + b"\0"), "cuModuleLoadData (PTX JIT)")
        self._function = ctypes.c_void_p()
        _check(lib, lib.cuModuleGetFunction(ctypes.byref(self._function), self._module, KERNEL_NAME.encode()), "cuModuleGetFunction")

    def launch(self, dst: Any, src: Any, blocks: int, threads: int, passes: int, stream: Any) -> None:
        """Copy ``src`` to ``dst`` (CUDA float32 tensors of the same number of bytes, a multiple of 16,
        16-byte aligned) ``passes`` times on ``blocks`` x ``threads``, queued on torch stream ``stream``."""
        nbytes = src.numel() * src.element_size()
        if dst.numel() * dst.element_size() != nbytes or nbytes % 16 or src.data_ptr() % 16 or dst.data_ptr() % 16:
            raise ValueError("copy kernel: dst and src must have the same bytes, a multiple of 16, 16-byte aligned")
        values = [ctypes.c_uint64(dst.data_ptr()), ctypes.c_uint64(src.data_ptr()), ctypes.c_uint64(nbytes // 16), ctypes.c_uint32(passes)]
        params = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
        _check(
            self._lib,
            self._lib.cuLaunchKernel(self._function, blocks, 1, 1, threads, 1, 1, 0, ctypes.c_void_p(stream.cuda_stream), params, None),
            f"cuLaunchKernel ({blocks} blocks x {threads} threads)",
        )
