"""Expected failures are UserErrors (one line, exit 2); anything else is a bug (exit 1)."""
from __future__ import annotations

import gc
import os
import signal

import pytest

from tunesearch.db import DatabaseError
from tunesearch.cli.exit_codes import EXIT_INTERNAL_ERROR, EXIT_USER_ERROR, run_command
from tunesearch.errors import (InputError, SettingError, ShapeError, UsageError, UserError,
                               ctrl_c_pressed, noticing_ctrl_c)
from tunesearch.onnx import OnnxImportError
from tunesearch.runtime.device import CompileError, DeviceUnavailable
from tunesearch.search import TuneError
from tunesearch.space.config import ConfigError


@pytest.mark.parametrize("error", [DatabaseError, OnnxImportError, DeviceUnavailable, TuneError,
                                   ConfigError, ShapeError, UsageError, SettingError, InputError])
def test_each_expected_error_is_a_user_error(error):
    assert issubclass(error, UserError)


def test_a_compile_error_is_not_a_user_error():
    # tunesearch writes every source it compiles: one that does not compile is its own bug
    assert not issubclass(CompileError, UserError)


def test_a_user_error_is_one_line_and_exit_2(capsys):
    def command():
        raise DatabaseError("database /x.db is\nnot valid")

    assert run_command(command) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert err == "tunesearch: error: database /x.db is not valid\n"


@pytest.mark.parametrize("bug", [ValueError("not enough values to unpack"), OSError(5, "I/O"),
                                 KeyError("k"), ZeroDivisionError("division by zero")])
def test_any_other_exception_is_an_internal_error_exit_1(capsys, monkeypatch, bug):
    monkeypatch.delenv("DEBUG", raising=False)

    def command():
        raise bug

    assert run_command(command) == EXIT_INTERNAL_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("tunesearch: internal error") and type(bug).__name__ in err
    assert "DEBUG=1" in err


def test_debug_1_adds_the_traceback_of_a_bug(capsys, monkeypatch):
    monkeypatch.setenv("DEBUG", "1")

    def command():
        return [1, 2][5]

    assert run_command(command) == EXIT_INTERNAL_ERROR
    err = capsys.readouterr().err
    assert "Traceback" in err and "IndexError" in err
    assert err.strip().splitlines()[-1].startswith("tunesearch: internal error")


def test_a_command_returns_its_own_code(capsys):
    assert run_command(lambda: None) == 0
    assert run_command(lambda: 3) == 3
    assert capsys.readouterr().err == ""


def test_a_command_that_returns_130_says_in_one_line_that_results_are_kept(capsys):
    assert run_command(lambda: 130) == 130
    assert capsys.readouterr().err.splitlines() == [
        "tunesearch: interrupted; results already stored are kept"]


class _PressesCtrlCWhenCollected:
    """Ctrl-C arriving while the garbage collector runs a finalizer: Python drops the
    KeyboardInterrupt raised there ("Exception ignored in ...") and the program goes on."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # bytecodes for the signal handler to run on, still in here
            pass


def press_ctrl_c_in_a_finalizer():
    _PressesCtrlCWhenCollected()
    gc.collect()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop itself
def test_a_ctrl_c_dropped_in_a_finalizer_still_ends_the_command_with_130(capsys):
    finished = []

    def command():
        press_ctrl_c_in_a_finalizer()
        finished.append(True)  # the KeyboardInterrupt did not reach here

    assert run_command(command) == 130
    assert finished == [True]
    assert "interrupted" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert run_command(lambda: None) == 0  # the next command starts afresh


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop itself
def test_a_failure_that_follows_a_ctrl_c_is_the_interruption(capsys):
    """A Ctrl-C that cuts a database commit short makes Optuna raise its own error
    (StorageInternalError) instead: the command was interrupted, not broken."""
    def command():
        press_ctrl_c_in_a_finalizer()
        raise RuntimeError("An exception is raised during the commit.")

    assert run_command(command) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "internal error" not in err

    def bug():
        raise RuntimeError("a bug")
    assert run_command(bug) == EXIT_INTERNAL_ERROR  # without Ctrl-C it is still a bug


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop itself
def test_ctrl_c_pressed_only_counts_under_noticing_ctrl_c():
    with noticing_ctrl_c():
        assert not ctrl_c_pressed()
        press_ctrl_c_in_a_finalizer()
        assert ctrl_c_pressed()
    assert not ctrl_c_pressed()
    with pytest.raises(KeyboardInterrupt):  # outside it, Python's own handler again
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
