"""`tunesearch db ...`: look into, share and maintain the result database.

    tunesearch db ls [--device KEY]      tunesearch db export FILE
    tunesearch db show KEY               tunesearch db import FILE
    tunesearch db stats                  tunesearch db merge OTHER_URL
    tunesearch db upgrade                tunesearch db prune [--space-version-below N]
                                                             [--unseen-days D]

Each takes `--db URL` (a SQLAlchemy URL or a SQLite file; default `$TUNESEARCH_DB`, else the
cache file). ls, show, stats and export only read: they open the database read-only and write
nothing, not even a schema into an empty file. An error is a `DatabaseError` (a
`tunesearch.errors.UserError`): the command line prints its one line on stderr and exits with
status 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from tunesearch.cli.arguments import (MAX_DAYS, ArgumentParser, add_db_argument, database,
                                      integer, number)
from tunesearch.cli.exit_codes import run_command
from tunesearch.search.saving import check_config_versions
from tunesearch.db import (
    DatabaseError, ResultRecord, Store, head_revision, read_database, read_export,
)


def _short(key: str, width: int = 16) -> str:
    return key if len(key) <= width else key[:width - 1] + "…"


def _when(result: ResultRecord) -> str:
    return result.created.strftime("%Y-%m-%d %H:%M") if result.created else ""


def _ls(args: argparse.Namespace, console: Console) -> None:
    with Store(args.db, readonly=True) as store:
        rows = store.list_results(args.device)
    table = Table(title=f"best results in {store.where}", title_justify="left", box=None,
                  header_style="bold underline", pad_edge=False)
    table.add_column("kernel", no_wrap=True, min_width=6)
    for column in ("name", "device"):  # these fold first when the terminal is narrow
        table.add_column(column, overflow="fold", min_width=len(column))
    for column in ("time", "GFLOPS", "speedup", "trials"):
        table.add_column(column, justify="right", no_wrap=True, min_width=len(column))
    table.add_column("created", no_wrap=True, min_width=10)
    for row in rows:
        result = row.result
        table.add_row(_short(row.kernel_key), row.kernel_name,
                      f"{row.device_name} ({row.backend})", f"{result.time_s * 1e6:.1f} us",
                      f"{result.gflops:.1f}", f"{result.speedup:.2f}x", str(result.trials),
                      _when(result)[:10])
    console.print(table)
    console.print(f"{len(rows)} result(s); `tunesearch db show KEY` for configs and details")


def _show(args: argparse.Namespace, console: Console) -> None:
    with Store(args.db, readonly=True) as store:
        details = store.show(args.key)
    if not details:
        raise DatabaseError(f"no kernel key starts with {args.key!r} in {store.where}")
    for detail in details:
        kernel = detail.kernel
        console.print(Text.assemble((kernel.key, "bold"), f"  {kernel.name}  (space version "
                      f"{kernel.space_version}, {detail.trial_count} trial(s) stored)"))
        console.print(f"ops: {kernel.ops}\nshapes: {kernel.shapes}\n{kernel.canonical}")
        for device, result in detail.results:
            console.print(Text.assemble((device.name, "bold"),
                                        f" ({device.backend}, {device.key})"))
            grid = Table.grid(padding=(0, 2))
            grid.add_column(style="dim", no_wrap=True)
            grid.add_column(overflow="fold")
            for name, value in (
                    ("time", f"{result.time_s * 1e6:.1f} us (spread {result.spread:.1%})"),
                    ("speed", f"{result.gflops:.1f} GFLOPS, {result.gbps:.1f} GB/s"),
                    ("speedup", f"{result.speedup:.2f}x over the default "
                                f"({result.default_time_s * 1e6:.1f} us)"),
                    ("search", f"{result.trials} trials, {result.sampler}"),
                    ("recorded", f"{_when(result)} on {result.host or '?'} with tunesearch "
                                 f"{result.tunesearch_version}"),
                    ("verified", "yes: measured here by `tunesearch tune`" if result.verified
                     else "no: imported or merged; the next `tunesearch tune` of this kernel "
                          "on this device measures it again"),
                    ("config", json.dumps(result.config, sort_keys=True))):
                grid.add_row(name, value)
            console.print(Padding(grid, (0, 0, 1, 2)))


def _stats(args: argparse.Namespace, console: Console) -> None:
    with Store(args.db, readonly=True) as store:
        stats = store.stats()
    table = Table(show_header=False, title="result database", title_justify="left")
    table.add_column("what")
    table.add_column("value", overflow="fold")
    for name, value in stats.items():
        if isinstance(value, dict):
            value = ", ".join(f"{key}: {count}" for key, count in sorted(value.items())) or "-"
        table.add_row(name.replace("_", " "), str(value))
    console.print(table)


def _export(args: argparse.Namespace, console: Console) -> None:
    with Store(args.db, readonly=True) as store:
        count = store.export(args.file)
    console.print(f"exported {count} result(s) from {store.where} to {args.file}")


def _import(args: argparse.Namespace, console: Console) -> None:
    exchange = read_export(args.file)  # the whole file is checked before the database is opened
    check_config_versions(exchange, args.file)
    with Store(args.db) as store:
        count = store.absorb(exchange)
    console.print(f"imported {args.file} into {store.where}: {count} result(s) are new bests")


def _merge(args: argparse.Namespace, console: Console) -> None:
    exchange = read_database(args.other_url)  # read and checked before the target is opened
    check_config_versions(exchange, args.other_url)
    with Store(args.db) as store:
        count = store.absorb(exchange)
    console.print(f"merged into {store.where}: {count} result(s) are new bests")


def _prune(args: argparse.Namespace, console: Console) -> None:
    if args.space_version_below is None and args.unseen_days is None:
        raise DatabaseError("prune needs --space-version-below N and/or --unseen-days D")
    with Store(args.db, must_exist=True) as store:  # a new database has nothing to prune
        count = store.prune(space_version_below=args.space_version_below,
                            devices_unseen_days=args.unseen_days)
    console.print(f"pruned {store.where}: removed {count} result(s)")


def _upgrade(args: argparse.Namespace, console: Console) -> None:
    with Store(args.db) as store:
        before, after = store.revision_before, store.revision
    if after != head_revision():
        raise DatabaseError(f"database {store.where} is at revision {after!r}, newer than this "
                            f"tunesearch knows ({head_revision()}); upgrade tunesearch")
    if before == after:
        console.print(f"{store.where} is already at the newest revision, {after}")
    else:
        console.print(f"upgraded {store.where} from {before or 'an empty database'} to {after}")


def _add_ls(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", metavar="KEY", help="only the results of this device key")


def _add_show(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("key", metavar="KEY", help="a kernel key or its first characters")


def _add_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the JSON export file")


def _add_merge(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("other_url", metavar="OTHER_URL", type=database("OTHER_URL"),
                        help="the database to take results from (opened read-only)")


def _add_prune(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--space-version-below", type=integer("--space-version-below", 0,
                                                              2 ** 31 - 1), metavar="N",
                        help="remove kernels whose search-space version is below N")
    parser.add_argument("--unseen-days", type=number("--unseen-days", 0.0, MAX_DAYS,
                                                     include_minimum=True), metavar="D",
                        help="remove devices not seen for D days")


def _add_nothing(parser: argparse.ArgumentParser) -> None:
    pass


Handler = Callable[[argparse.Namespace, Console], None]
COMMANDS: dict[str, tuple[Handler, Callable[[argparse.ArgumentParser], None], str]] = {
    "ls": (_ls, _add_ls, "list the best result of every kernel and device"),
    "show": (_show, _add_show, "show a kernel, its best result per device and its config"),
    "stats": (_stats, _add_nothing, "count kernels, devices, results and trials"),
    "export": (_export, _add_file, "write everything to a portable JSON file"),
    "import": (_import, _add_file, "merge an export file in, keeping the faster results"),
    "merge": (_merge, _add_merge, "merge another database in, keeping the faster results"),
    "prune": (_prune, _add_prune, "remove old space versions and devices not seen lately"),
    "upgrade": (_upgrade, _add_nothing, "bring the database schema to this tunesearch's"),
}


def _console() -> Console:
    # No markup: names, paths and configs come from the database and are printed as they are.
    console = Console(markup=False, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # piped into a file or a pager: do not squeeze to 80 columns
        console = Console(markup=False, highlight=False, width=160)
    return console


def _runner(handler: Handler) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        handler(args, _console())
        return 0

    return run


def register(subparsers) -> argparse.ArgumentParser:
    """Add the `db` command group to an argparse subparsers object; returns its parser.

    Each subcommand sets `args.func`, which runs it and returns 0; its failures are raised
    (`DatabaseError`), for the caller to report (`tunesearch.cli.exit_codes.run_command`).
    """
    db_parser = subparsers.add_parser("db", help="look into, share and maintain the result "
                                      "database", description=__doc__.split("\n\n")[0])
    commands = db_parser.add_subparsers(dest="db_command", metavar="COMMAND", required=True)
    common = ArgumentParser(add_help=False)
    add_db_argument(common)
    for name, (handler, add_arguments, summary) in COMMANDS.items():
        parser = commands.add_parser(name, parents=[common], help=summary, description=summary)
        add_arguments(parser)
        parser.set_defaults(func=_runner(handler))
    return db_parser


def main(argv: list[str] | None = None) -> int:
    """Run `db` commands without the rest of the CLI: `python -m tunesearch.cli.db db ls`."""
    parser = ArgumentParser(prog="tunesearch")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return run_command(lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
