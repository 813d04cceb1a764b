"""How a command of the command line ends: its exit code, and the one line on stderr that says
why where it failed (see tunesearch.errors for which failures are expected)."""
from __future__ import annotations

import sys
import traceback
from typing import Callable

from tunesearch import settings
from tunesearch.errors import UserError, ctrl_c_pressed, noticing_ctrl_c, one_line

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1
EXIT_INTERRUPTED = 130


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
    """DEBUG's level, or 0 where its value is bad: the failure being reported comes first."""
    try:
        return settings.debug()
    except UserError:
        return 0
