"""`tunesearch status`: which kernels are done, in progress (by which worker, for how long, when
its lease expires) and waiting, per device and per model, in a database that workers share.

    info = status("postgresql://db.lan/tunesearch")   # a JSON-ready dict
    print_status(info)                                # rich tables on the terminal

A kernel is `running` while a worker holds a live lease on it, `stalled` when that lease has
expired (its worker died or lost the database; the next worker to look takes it over),
`waiting`, `done` (a result is stored) or `failed` (no config ran correctly).
"""
from __future__ import annotations

from collections import defaultdict

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tunesearch.db import Store
from tunesearch.db.leases import DONE, FAILED, RUNNING, WAITING, LeaseBoard, LeaseRow

KERNEL_STATES = ("done", "running", "stalled", "waiting", "failed")
UNNAMED = "(no model name)"


def _kernel_state(leases: list[LeaseRow]) -> str:
    """One state for a kernel from the states of its slots (the liveliest wins)."""
    states = {("stalled" if lease.expired else lease.state) for lease in leases}
    for state in (RUNNING, "stalled", WAITING, DONE):
        if state in states:
            return state
    return FAILED


def _counts(states) -> dict[str, int]:
    counted = {state: 0 for state in KERNEL_STATES}
    for state in states:
        counted[state] += 1
    return counted


def status(store_url: str | None = None) -> dict:
    """The progress of every tuning run recorded in a database (see the module docstring).

    Returns {"database", "now", "devices": [{"device_key", "device_name", "kernels", "done",
    "running", "stalled", "waiting", "failed", "models": [...], "in_progress": [...],
    "failed_kernels": [...]}]}; times are seconds, measured by the database's clock.
    """
    with Store(store_url, readonly=True) as store:  # looking writes nothing
        board = LeaseBoard(store)
        now, rows = board.leases()
        names = board.device_names()
    by_kernel: dict[tuple[str, str], list[LeaseRow]] = defaultdict(list)
    for row in rows:
        by_kernel[row.device_key, row.kernel_key].append(row)
    devices = []
    for device_key in dict.fromkeys(row.device_key for row in rows):
        kernels = {key: leases for (dev, key), leases in by_kernel.items() if dev == device_key}
        state = {key: _kernel_state(leases) for key, leases in kernels.items()}
        models: dict[str, list[str]] = defaultdict(list)
        for key, leases in kernels.items():
            for model in leases[0].models or ("",):
                models[model or UNNAMED].append(key)
        in_progress = [{
            "kernel": row.kernel_name, "kernel_key": row.kernel_key, "slot": row.slot,
            "slots": row.slots, "worker": row.worker, "stalled": row.expired,
            "running_s": (now - row.claimed_at).total_seconds() if row.claimed_at else None,
            "expires_in_s": (row.expires_at - now).total_seconds() if row.expires_at else None,
            "trials": row.trials, "budget": row.budget, "claims": row.claims,
            "models": list(row.models)}
            for leases in kernels.values() for row in leases if row.state == RUNNING]
        failed = [{"kernel": leases[0].kernel_name, "kernel_key": key,
                   "message": next((row.message for row in leases if row.message), "")}
                  for key, leases in kernels.items() if state[key] == FAILED]
        devices.append({
            "device_key": device_key, "device_name": names.get(device_key, ""),
            "kernels": len(kernels), **_counts(state.values()),
            "models": [{"model": model, "kernels": len(keys),
                        **_counts(state[key] for key in keys)}
                       for model, keys in sorted(models.items())],
            "in_progress": in_progress, "failed_kernels": failed})
    return {"database": store.where, "now": now.isoformat(), "devices": devices}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds:.0f} s"
    if seconds < 3600:
        return f"{sign}{seconds // 60:.0f} min {seconds % 60:.0f} s"
    return f"{sign}{seconds // 3600:.0f} h {seconds % 3600 // 60:.0f} min"


def print_status(info: dict, console: Console | None = None) -> None:
    """Print what `status` returned as rich tables."""
    console = console or Console(markup=False, highlight=False)
    if not info["devices"]:
        console.print(f"{info['database']}: no tuning runs registered (tunesearch tune "
                      "--workers N registers one)", markup=False)
        return
    for device in info["devices"]:
        name = f"{device['device_name']} " if device["device_name"] else ""
        counts = ", ".join(f"{device[state]} {state}" for state in KERNEL_STATES
                           if device[state])
        console.print(f"{name}({device['device_key']}): {device['kernels']} kernel(s): "
                      f"{counts}", markup=False)
        models = Table("model", *KERNEL_STATES, "kernels", title="per model",
                       title_justify="left")
        for model in device["models"]:
            models.add_row(Text(model["model"]), *(str(model[s]) for s in KERNEL_STATES),
                           str(model["kernels"]))
        console.print(models)
        if device["in_progress"]:
            running = Table("kernel", "slot", "worker", "for", "lease expires in", "trials",
                            title="in progress", title_justify="left")
            for lease in device["in_progress"]:
                expiry = "expired" if lease["stalled"] else _duration(lease["expires_in_s"])
                budget = f"/{lease['budget']}" if lease["budget"] else ""
                running.add_row(Text(lease["kernel"]), f"{lease['slot'] + 1}/{lease['slots']}",
                                Text(lease["worker"] or "-"), _duration(lease["running_s"]), expiry,
                                f"{lease['trials']}{budget}")
            console.print(running)
        for failed in device["failed_kernels"]:
            console.print(f"failed: {failed['kernel']} ({failed['kernel_key']}): "
                          f"{failed['message']}", markup=False)
