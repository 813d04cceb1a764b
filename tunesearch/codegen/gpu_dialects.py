"""OpenCL C and CUDA C: the words in which the GPU lowering is spelled.

Both keep the C family's expressions (codegen/dialect.py) and add what a GPU kernel needs: the entry
point's qualifiers, the work-item and work-group indices of a 1-D launch, local/shared arrays and
the barrier. float16 buffers are storage only: values are widened to float on load and narrowed on
store, so the kernel works on devices without half arithmetic (PoCL has no cl_khr_fp16) and
needs no header (NVRTC ships no cuda_fp16.h).
"""
from __future__ import annotations

import math

from tunesearch.graph.dtypes import DType, dtypes
from tunesearch.graph.ops import UnaryOps
from tunesearch.codegen.dialect import Dialect


class GPUDialect(Dialect):
    """What OpenCL C and CUDA C share; subclasses fill in the names."""
    name = "gpu"
    local_id = ""     # this work-item's index in its work-group (a 1-D launch)
    group_id = ""     # this work-group's index
    barrier = ""      # a work-group barrier that also orders local-memory accesses
    global_qual = ""  # the address space of a buffer parameter
    local_qual = ""   # the address space of an array shared by a work-group
    unroll_pragma = "#pragma unroll {n}"
    # how a float16 element is read into a float and a float written into one, in the
    # dialect's words: {pointer}, {index} and {value} are filled in
    half_read = "{pointer}[{index}]"
    half_write = "{pointer}[{index}] = {value};"

    def type_name(self, dtype: DType) -> str:
        # half is widened to float in registers; storage_type keeps it half in memory
        return "float" if dtype is dtypes.float16 else dtype.c_name

    def storage_type(self, dtype: DType) -> str:
        """The element type of a buffer of dtype."""
        return dtype.c_name

    def read(self, dtype: DType, pointer: str, index: str) -> str:
        spelling = self.half_read if dtype is dtypes.float16 else "{pointer}[{index}]"
        return spelling.format(pointer=pointer, index=index)

    def write(self, dtype: DType, pointer: str, index: str, value: str) -> str:
        spelling = self.half_write if dtype is dtypes.float16 else "{pointer}[{index}] = {value};"
        return spelling.format(pointer=pointer, index=index, value=value)

    def header(self, buffer_dtypes: set[DType]) -> str:
        """Lines that must precede the kernels; repeating them is harmless, so sources that each
        carry a header can be concatenated into one program."""
        return ""

    def signature(self, name: str, params: list[str], work_group: int) -> str:
        raise NotImplementedError

    def param(self, dtype: DType, index: int, output: bool) -> str:
        const = "" if output else "const "
        return f"{self.global_qual}{const}{self.storage_type(dtype)}* {self.restrict} data{index}"

    def local_array(self, dtype: DType, name: str, size: int) -> str:
        return f"{self.local_qual} {self.type_name(dtype)} {name}[{size}];"


class OpenCLDialect(GPUDialect):
    """OpenCL C 1.2: __kernel, __global, __local, get_local_id(0), barrier(CLK_LOCAL_MEM_FENCE)."""
    name = "opencl"
    half_read = "vload_half({index}, {pointer})"
    half_write = "vstore_half({value}, {index}, {pointer});"
    restrict = "restrict"
    local_id = "(int)get_local_id(0)"
    group_id = "(int)get_group_id(0)"
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    global_qual = "__global "
    local_qual = "__local"

    def type_name(self, dtype: DType) -> str:
        # pointers to bool may not be kernel arguments; a byte holds 0 or 1 on both sides
        return "uchar" if dtype is dtypes.bool else super().type_name(dtype)

    def storage_type(self, dtype: DType) -> str:
        return "uchar" if dtype is dtypes.bool else dtype.c_name

    def math_name(self, name: str) -> str:
        return name  # the OpenCL builtins are overloaded on float

    def unary(self, op: UnaryOps, x: str, dtype: DType) -> str:
        if op is UnaryOps.CAST and dtype is dtypes.bool:
            return f"((uchar)(({x})!=0))"
        return super().unary(op, x, dtype)

    def signature(self, name: str, params: list[str], work_group: int) -> str:
        return (f"__kernel __attribute__((reqd_work_group_size({work_group}, 1, 1))) "
                f"void {name}({', '.join(params)})")



class CUDADialect(GPUDialect):
    """CUDA C++ for NVRTC: extern "C" __global__, __shared__, threadIdx.x, __syncthreads()."""
    name = "cuda"
    restrict = "__restrict__"
    local_id = "(int)threadIdx.x"
    group_id = "(int)blockIdx.x"
    barrier = "__syncthreads();"
    local_qual = "__shared__"
    half_read = "ts_half_to_float({pointer}[{index}])"
    half_write = "{pointer}[{index}] = ts_float_to_half({value});"

    def literal(self, value, dtype: DType) -> str:
        # NVRTC has no math.h: spell infinities and NaN through their bit patterns
        if dtype.is_float and (math.isnan(value) or math.isinf(value)):
            if math.isnan(value):
                return "__int_as_float(0x7fffffff)"
            return "__int_as_float(0x7f800000)" if value > 0 else "(-__int_as_float(0x7f800000))"
        return super().literal(value, dtype)

    def storage_type(self, dtype: DType) -> str:
        return "unsigned short" if dtype is dtypes.float16 else dtype.c_name

    def header(self, buffer_dtypes: set[DType]) -> str:
        # NVRTC ships no cuda_fp16.h: convert with the PTX instructions themselves
        return _CUDA_HALF if dtypes.float16 in buffer_dtypes else ""

    def signature(self, name: str, params: list[str], work_group: int) -> str:
        return (f'extern "C" __global__ void __launch_bounds__({work_group}) '
                f"{name}({', '.join(params)})")



_CUDA_HALF = """#ifndef TS_HALF_CONVERSIONS
#define TS_HALF_CONVERSIONS
__device__ __forceinline__ float ts_half_to_float(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short ts_float_to_half(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
#endif
"""
