"""The errors tunesearch expects: a user can cause them and act on them.

Every expected failure derives from `UserError`; its message is one line that names the input and
says what is wrong. The command line turns a `UserError` into that line on stderr and exit code 2,
in one place (`run_command`, through which `tunesearch.cli.main` runs every command); any other
exception is a bug in tunesearch and ends with exit code 1 and a line saying so (the traceback
with DEBUG=1).

This module imports nothing from tunesearch when it is imported, so every layer (the database
layer included, which otherwise imports nothing else of tunesearch) may derive its errors from it.

    from tunesearch.errors import UserError
    try:
        model = tunesearch.onnx.load(path)
    except UserError as err:
        print(f"cannot load {path}: {err}")
"""
from __future__ import annotations

import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from typing import Callable, Iterator


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


EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1
EXIT_INTERRUPTED = 130


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


def run_command(command: Callable[[], int | None], prog: str = "tunesearch") -> int:
    """Run one command of the command line and return its exit code; the one place where
    failures become exit codes. A `UserError` is its one line on stderr and exit 2; Ctrl-C is
    130, also where the command finished because its KeyboardInterrupt was dropped (see
    `ctrl_c_pressed`), or failed after Ctrl-C because of it (a database commit it cut short,
    which Optuna reports as its own error); anything else is a bug: exit 1 and one line that
    says so (DEBUG=1 adds the traceback)."""
    try:
        with noticing_ctrl_c():
            try:
                code = command() or 0
            except UserError:
                raise
            except Exception:
                if ctrl_c_pressed():
                    raise KeyboardInterrupt from None
                raise
            # a command that stopped for Ctrl-C and returned 130 itself (tune, after showing
            # what it found) gets the same line as one the KeyboardInterrupt ended
            if code == EXIT_INTERRUPTED or code == 0 and ctrl_c_pressed():
                raise KeyboardInterrupt
            return code
    except UserError as err:
        print(f"{prog}: error: {one_line(err) or type(err).__name__}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; results already stored are kept", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:  # noqa: BLE001  (every other exception is a bug: say so)
        if _debug_level() >= 1:
            traceback.print_exc()
        detail = one_line(err)
        detail = detail if len(detail) <= 300 else detail[:297] + "..."
        print(f"{prog}: internal error (a bug in tunesearch): {type(err).__name__}"
              f"{': ' + detail if detail else ''}"
              f"{'' if _debug_level() >= 1 else '; DEBUG=1 shows the traceback'}",
              file=sys.stderr)
        return EXIT_INTERNAL_ERROR


def _debug_level() -> int:
    from tunesearch import settings  # settings derive their errors from this module
    try:
        return settings.debug()
    except UserError:
        return 0
