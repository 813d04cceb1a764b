"""The few dtypes the graph knows, with their numpy and C names."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    np: type
    c_name: str

    @property
    def is_float(self) -> bool:
        return self.name.startswith("float")

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"


class dtypes:
    float32 = DType("float32", 4, np.float32, "float")
    float16 = DType("float16", 2, np.float16, "half")
    int32 = DType("int32", 4, np.int32, "int")
    bool = DType("bool", 1, np.bool_, "bool")

    @staticmethod
    def from_numpy(dt) -> DType:
        dt = np.dtype(dt)
        if dt == np.float32 or dt == np.float64:
            return dtypes.float32
        if dt == np.float16:
            return dtypes.float16
        if dt.kind in "iu":
            return dtypes.int32
        if dt == np.bool_:
            return dtypes.bool
        raise TypeError(f"unsupported dtype {dt}: tunesearch supports float32, float16, int32, bool")

    @staticmethod
    def by_name(name: str) -> DType:
        for dt in (dtypes.float32, dtypes.float16, dtypes.int32, dtypes.bool):
            if dt.name == name:
                return dt
        raise TypeError(f"unsupported dtype {name!r}: tunesearch supports float32, float16, int32, bool")


def result_dtype(a: DType, b: DType) -> DType:
    """The dtype of a binary op on a and b: float wins over int wins over bool."""
    order = [dtypes.bool, dtypes.int32, dtypes.float16, dtypes.float32]
    return max(a, b, key=order.index)
