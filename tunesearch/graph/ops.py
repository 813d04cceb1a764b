"""The op set: four families (unary, binary, reduce, movement) plus load and const, and the
gather: a load at a position that a computed index picks along one axis (an embedding's rows;
as a one-hot sum it cost the whole axis).

Everything the Tensor offers is built from these and nothing else.
"""
from __future__ import annotations

from enum import Enum


class UnaryOps(Enum):
    EXP2 = "exp2"
    LOG2 = "log2"
    SQRT = "sqrt"
    RECIP = "recip"
    NEG = "neg"
    SIN = "sin"
    CAST = "cast"  # carries its target dtype on the node


class BinaryOps(Enum):
    ADD = "add"
    MUL = "mul"
    MAX = "max"
    CMPLT = "cmplt"
    CMPEQ = "cmpeq"
    MOD = "mod"    # integers only
    IDIV = "idiv"  # integers only, truncating like C
    WHERE = "where"  # the one ternary: where(cond, a, b)


class ReduceOps(Enum):
    SUM = "sum"
    MAX = "max"


class MovementOps(Enum):
    RESHAPE = "reshape"
    PERMUTE = "permute"
    EXPAND = "expand"
    PAD = "pad"
    SHRINK = "shrink"
    FLIP = "flip"


class LoadOps(Enum):
    BUFFER = "buffer"  # a realized buffer
    CONST = "const"


COMPARISONS = (BinaryOps.CMPLT, BinaryOps.CMPEQ)
INT_ONLY = (BinaryOps.MOD, BinaryOps.IDIV)
