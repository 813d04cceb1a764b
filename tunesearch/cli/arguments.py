"""Arguments of the command line, checked as they are parsed: before any work, before any file is
opened or created, a bad value is one line on stderr and exit code 2.

    parser = ArgumentParser(prog="tunesearch")
    parser.add_argument("--trials", type=count("--trials"), default=40)
    parser.add_argument("--time-budget", type=seconds("--time-budget"))

This module imports nothing from tunesearch but its errors and path checks, so every command
group (the `db` commands included) can use it.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Callable, NoReturn

from tunesearch.cli.exit_codes import EXIT_USER_ERROR
from tunesearch.errors import UsageError, one_line
from tunesearch.paths import check_database, check_path

SEED_LIMIT = 2 ** 32  # Optuna's samplers seed numpy's RandomState, which takes 0 .. 2**32 - 1
INT32_LIMIT = 2 ** 31
MAX_DAYS = 1_000_000.0  # ~2700 years: more is a typo (and past what a date can hold)
DB_HELP = ("database URL or SQLite file (default: $TUNESEARCH_DB, else tunesearch.db in the "
           "cache folder: $TUNESEARCH_CACHE or ~/.cache/tunesearch)")


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with a bad argument reported as one line (and exit 2) instead of the usage
    block and the error: every expected failure of the command line reads the same."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)",
              file=sys.stderr)
        raise SystemExit(EXIT_USER_ERROR)


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    """The `--db URL` option that every command with a database takes, with one help text;
    None (not given) means the default database, which `tunesearch.db` resolves."""
    parser.add_argument("--db", metavar="URL", default=None, type=database("--db"),
                        help=DB_HELP)


def database(name: str) -> Callable[[str], str]:
    """An argparse type: a database URL or SQLite file whose name the system and SQLAlchemy's
    URLs can take (UTF-8, names within the file system's length)."""

    def parse(text: str) -> str:
        try:
            check_database(text, name)
        except UsageError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return text

    parse.__name__ = "database"
    return parse


def check_kept_database(url: str | None, what: str) -> None:
    """Refuse, before any work, a database that keeps nothing: SQLite in memory (`sqlite://`,
    `:memory:`) would take every result of `what` and lose it when the command ends."""
    if not url:
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError
    try:
        parsed = make_url(url)
    except ArgumentError:
        return  # the store says what is wrong with it, in its own words
    memory = parsed.database in (None, "", ":memory:") or \
        parsed.query.get("mode") == "memory"
    if parsed.get_backend_name() == "sqlite" and memory:
        raise UsageError(f"{what} into {url}: an in-memory database keeps nothing once the "
                         "command ends; give a file (sqlite:///results.db)")


def integer(name: str, minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer from minimum to maximum (inclusive; None: no upper bound)."""
    bounds = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} takes an integer, got {text!r}") from None
        if value < minimum or maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{name} must be {bounds}, got {text}")
        return value

    parse.__name__ = "integer"  # what argparse calls the type in its messages
    return parse


def count(name: str) -> Callable[[str], int]:
    """An argparse type: a positive count (trials, repeats, workers)."""
    return integer(name, 1, INT32_LIMIT - 1)


def number(name: str, minimum: float = 0.0, maximum: float = math.inf, *,
           include_minimum: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number above minimum (or from it, with include_minimum) and
    at most maximum; nan and inf are refused."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} takes a number, got {text!r}") from None
        above = value >= minimum if include_minimum else value > minimum
        if not math.isfinite(value) or not above or value > maximum:
            low = f"{'at least' if include_minimum else 'above'} {minimum:g}"
            high = f" and at most {maximum:g}" if math.isfinite(maximum) else ""
            raise argparse.ArgumentTypeError(f"{name} must be a finite number {low}{high}, "
                                             f"got {text}")
        return value

    parse.__name__ = "number"
    return parse


def seconds(name: str) -> Callable[[str], float]:
    """An argparse type: a positive, finite number of seconds."""
    return number(name, 0.0)


def check_new_file(path: str | os.PathLike, flag: str) -> None:
    """Refuse, before any work, a file that cannot be written: a name is given, its folder
    must exist."""
    if not str(path).strip():
        raise UsageError(f"{flag} needs a file name, not an empty one")
    check_path(path, flag)
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise UsageError(f"{flag} {path} is a folder, not a file")
    if not folder.is_dir():
        raise UsageError(f"{flag} {path}: the folder {folder} does not exist")


def resolve_model(text: str) -> Path:
    """A model path, or example:NAME for a model bundled with tunesearch."""
    if text.startswith("example:"):
        from tunesearch import examples
        try:
            return examples.path(text.split(":", 1)[1])
        except FileNotFoundError as exc:
            raise UsageError(str(exc)) from None
    check_path(text, "model")
    path = Path(text)
    if not path.exists():
        raise UsageError(f"model file not found: {text}")
    if not path.is_file():
        raise UsageError(f"model {text} is a folder, not an .onnx file")
    return path
