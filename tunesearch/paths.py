"""Paths checked for what the system and the database can take, before a file is opened or made:
a name longer than the file system allows, a NUL byte, and, where the path goes into a database
URL or a compiler's command line, a name that is not UTF-8 (bytes from the command line that
Python keeps as surrogate escapes).

    check_path("out.npz", "--outputs")                 # UsageError, one line, or None
    check_database("results.db", "--db")               # also: UTF-8, as SQLAlchemy's URL needs

This module imports nothing from tunesearch but its errors, so settings and arguments use it.
"""
from __future__ import annotations

import os
from pathlib import Path

from tunesearch.errors import UsageError

_NAME_MAX = 255  # bytes of one name on Linux, macOS and Windows file systems
_PATH_MAX = 4096  # bytes of a whole path the Linux kernel takes


def shown(text: str, keep: int = 60) -> str:
    """A path as a message shows it: escapes for bytes that are not text, long ones cut."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= keep else text[:keep // 2] + "..." + text[-keep // 2:]


def _limits(path: Path) -> tuple[int, int]:
    """NAME_MAX and PATH_MAX of the file system that holds the nearest existing folder."""
    folder = path if path.is_absolute() else Path.cwd() / path
    while not _is_dir(folder) and folder != folder.parent:
        folder = folder.parent
    try:
        return os.pathconf(folder, "PC_NAME_MAX"), os.pathconf(folder, "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):
        return _NAME_MAX, _PATH_MAX


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # a name too long to ask about is no folder
        return False


def check_path(path: str | os.PathLike, what: str, *, utf8: bool = False) -> None:
    """Refuse a path the system cannot take: `what` names where it came from (a flag or a
    setting). utf8: the path must also be UTF-8 text (a database URL, a compiler's argument)."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if "\0" in text:
        raise UsageError(f"{what} {shown(text)}: a path cannot hold a NUL byte")
    if utf8:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError(f"{what} {shown(text)}: the name is not UTF-8 text, which "
                             "tunesearch needs here; rename it or give another") from None
    try:
        raw = os.fsencode(text)
    except UnicodeEncodeError:
        raise UsageError(f"{what} {shown(text)}: the name cannot be written in this system's "
                         "file name encoding") from None
    name_max, path_max = _limits(Path(text))
    for part in raw.split(b"/"):
        if len(part) > name_max:
            raise UsageError(f"{what} {shown(text)}: a name of {len(part)} bytes is longer than "
                             f"the file system allows ({name_max})")
    whole = len(os.fsencode(os.path.abspath(text)))
    if whole >= path_max:
        raise UsageError(f"{what} {shown(text)}: the path of {whole} bytes is longer than the "
                         f"system allows ({path_max - 1})")


def check_database(url: str, what: str) -> None:
    """A database given as a URL or a SQLite file: UTF-8 text (SQLAlchemy's URLs are), and a
    file name the system can take."""
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{what} {shown(url)}: the database name is not UTF-8 text, which "
                         "database URLs need; rename the file or give another") from None
    if "://" not in url:
        check_path(url, what, utf8=True)
    elif url.startswith("sqlite") and url.partition("://")[2].startswith("/"):
        file = url.partition("://")[2][1:].partition("?")[0]
        if file and file != ":memory:" and not file.startswith("file:"):
            check_path(file, what, utf8=True)
