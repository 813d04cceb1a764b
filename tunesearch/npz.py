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
    names = [v.name for v in model.inputs]
    try:
        with archive:
            declared = {name: _header(archive, name) for name in archive.files}
            missing = [name for name in names if name not in declared]
            unknown = sorted(set(declared) - set(names))
            if missing or unknown:
                raise InputError(f"inputs {path}: the model's inputs are {names}" +
                                 (f"; missing {missing}" if missing else "") +
                                 (f"; unknown {unknown}" if unknown else ""))
            # what each array declares is checked before its data is read: a small archive
            # may unpack to more than memory holds
            for v in model.inputs:
                shape, dtype = declared[v.name]
                if dtype.kind not in _KINDS.get(v.dtype.kind, v.dtype.kind):
                    raise InputError(f"inputs {path}: input '{v.name}' has dtype {dtype}; the "
                                     f"model takes {v.dtype}")
                if shape != tuple(v.shape):
                    raise InputError(f"inputs {path}: input '{v.name}' has shape {shape}; the "
                                     f"model takes {tuple(v.shape)}")
            arrays = {name: archive[name] for name in names}
    except InputError:  # a ValueError, raised above: already its own line
        raise
    except _DAMAGED as err:
        raise InputError(f"cannot read inputs {path}: {err}") from None
    for v in model.inputs:  # the data read is what the header declared
        if arrays[v.name].shape != tuple(v.shape):
            raise InputError(f"inputs {path}: input '{v.name}' holds data of another shape "
                             "than its header declares")
    return arrays


def _header(archive, name: str) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype an array of the archive declares, read without its data."""
    member = name + ".npy" if name + ".npy" in archive.zip.namelist() else name
    with archive.zip.open(member) as file:
        version = np.lib.format.read_magic(file)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        shape, _, dtype = read(file)
    return tuple(shape), np.dtype(dtype)


def write_outputs(path: str | os.PathLike, outputs: dict[str, np.ndarray]) -> None:
    """Write the outputs, by name, to an .npz file at exactly this path (numpy would add
    ".npz" to a name without it, and write somewhere the user did not say)."""
    try:
        with open(path, "wb") as file:
            np.savez(file, **outputs)
    except OSError as err:
        raise UsageError(f"cannot write outputs {path}: {err.strerror or err}") from None
