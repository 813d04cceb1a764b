"""The errors tunesearch expects: a user can cause them and act on them.

Every expected failure derives from `UserError`; its message is one line that names the input and
says what is wrong. The command line turns a `UserError` into that line on stderr and exit code 2,
in one place (`tunesearch.cli.exit_codes.run_command`, through which `tunesearch.cli.main` runs
every command); any other exception is a bug in tunesearch and ends with exit code 1 and a line
saying so (the traceback with DEBUG=1).

This module imports nothing from tunesearch, so every layer (the database layer included, which
otherwise imports nothing else of tunesearch) may derive its errors from it.

    from tunesearch.errors import UserError
    try:
        model = tunesearch.onnx.load(path)
    except UserError as err:
        print(f"cannot load {path}: {err}")
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


def one_line(text: object) -> str:
    """The message squeezed to one line (runs of whitespace, newlines included, become one
    space), so that a message quoting a file name or a driver's text cannot break the rule."""
    return " ".join(str(text).split())


class UserError(Exception):
    """An expected failure: a bad argument, file, model, setting or database. `str(err)` is one
    line for the user."""


class UsageError(UserError):
    """A bad argument of a command or a function."""


class SettingError(UserError, ValueError):
    """An environment variable (see `tunesearch.settings`) with a value tunesearch cannot use."""


class ShapeError(UserError, ValueError):
    """A shape, axis or argument that a Tensor op cannot take."""


class InputError(UserError, ValueError):
    """Data handed to a model that does not fit it: missing names, wrong shapes or dtypes."""


_ctrl_c = threading.Event()


def ctrl_c_pressed() -> bool:
    """Whether Ctrl-C came while a command ran under `noticing_ctrl_c`, even where the
    KeyboardInterrupt it raised never reached a handler: Python drops an exception raised in a
    weakref callback or a `__del__` (SQLAlchemy's and the garbage collector's run at any bytecode)
    with an "Exception ignored" line and goes on. Long loops ask this between steps, so a
    Ctrl-C cannot be lost that way."""
    return _ctrl_c.is_set()


def _on_ctrl_c(signum, frame) -> None:
    _ctrl_c.set()
    raise KeyboardInterrupt


@contextmanager
def noticing_ctrl_c() -> Iterator[None]:
    """Record every Ctrl-C for `ctrl_c_pressed` while the block runs (on the main thread, where
    Python delivers signals, and only where Ctrl-C still has Python's own handler)."""
    _ctrl_c.clear()
    install = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if install:
        signal.signal(signal.SIGINT, _on_ctrl_c)
    try:
        yield
    finally:
        _ctrl_c.clear()
        if install:
            signal.signal(signal.SIGINT, signal.default_int_handler)
