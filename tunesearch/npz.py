"""A model's inputs from an .npz file and its outputs into one, for `tunesearch run`.

    inputs = read_inputs("inputs.npz", model)     # {name: array}, checked against the model
    write_outputs("outputs.npz", outputs)         # (tunesearch.cli.arguments.check_new_file first)

Every problem (a file that is not an .npz archive, a missing or unknown name, a dtype of another
kind, a shape the model does not take) is a one-line `InputError`, raised before anything runs.
"""
from __future__ import annotations

import os
import struct
import zipfile
import zlib

import numpy as np

from tunesearch.errors import InputError, UsageError

# the kinds of numpy dtype that may feed an input of each kind: a float input takes floats
# (float64 is rounded to float32, as numpy would), never integers or booleans
_KINDS = {"f": "f", "i": "iu", "u": "iu", "b": "b"}
# what zipfile and numpy raise for a damaged archive: an entry that claims encryption
# (RuntimeError) or a compression zipfile lacks (NotImplementedError), a bad deflate stream
_DAMAGED = (OSError, ValueError, EOFError, zipfile.BadZipFile, RuntimeError, NotImplementedError,
            zlib.error, struct.error)


def read_inputs(path: str | os.PathLike, model) -> dict[str, np.ndarray]:
    """The arrays of an .npz file, one per input of `model` (an OnnxModel), checked."""
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"cannot read inputs {path}: no such file") from None
    except _DAMAGED as err:
        raise InputError(f"cannot read inputs {path}: not an .npz archive ({err})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise InputError(f"cannot read inputs {path}: a single .npy array, not an .npz archive "
                         "of named arrays (np.savez(path, input_name=array))")
    try:
        with archive:
            arrays = {name: archive[name] for name in archive.files}
    except _DAMAGED as err:
        raise InputError(f"cannot read inputs {path}: {err}") from None
    names = [v.name for v in model.inputs]
    missing = [name for name in names if name not in arrays]
    unknown = sorted(set(arrays) - set(names))
    if missing or unknown:
        raise InputError(f"inputs {path}: the model's inputs are {names}" +
                         (f"; missing {missing}" if missing else "") +
                         (f"; unknown {unknown}" if unknown else ""))
    for v in model.inputs:
        array = arrays[v.name]
        if array.dtype.kind not in _KINDS.get(v.dtype.kind, v.dtype.kind):
            raise InputError(f"inputs {path}: input '{v.name}' has dtype {array.dtype}; the "
                             f"model takes {v.dtype}")
        if array.shape != tuple(v.shape):
            raise InputError(f"inputs {path}: input '{v.name}' has shape {array.shape}; the "
                             f"model takes {tuple(v.shape)}")
    return arrays


def write_outputs(path: str | os.PathLike, outputs: dict[str, np.ndarray]) -> None:
    """Write the outputs, by name, to an .npz file at exactly this path (numpy would add
    ".npz" to a name without it, and write somewhere the user did not say)."""
    try:
        with open(path, "wb") as file:
            np.savez(file, **outputs)
    except OSError as err:
        raise UsageError(f"cannot write outputs {path}: {err.strerror or err}") from None
