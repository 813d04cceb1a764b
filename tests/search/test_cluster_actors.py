"""The Ray engine when a node dies mid-search: its kernel goes to another actor of the same
device, or comes back unfinished when none is left, and the run ends either way. Ray, its
actors and the database are real; the measurements are made up (tests/search/cluster_run.py).
Ray's servers listen on every interface, so Ray runs in a network namespace of its own."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.cli.test_cluster import _env, _namespaces_work, _session

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, units: int, mode: str = "dies") -> dict:
    pytest.importorskip("ray")
    if not _namespaces_work():
        pytest.skip("no network namespace here (unshare -n) to keep Ray's servers private")
    out, ray_dir = tmp_path / "out.json", tempfile.mkdtemp(prefix="tsray-")
    env = _env()
    shell = subprocess.Popen(
        ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', sys.executable,
         "-m", "tests.search.cluster_run", str(units), f"sqlite:///{tmp_path / 't.db'}",
         str(out), ray_dir, mode], env=env, cwd=ROOT, start_new_session=True,
        stderr=subprocess.PIPE, text=True)
    try:
        if mode == "stalls":  # Ctrl-C once the second kernel's search is under way
            marker = out.with_suffix(".died")
            deadline = time.time() + 300
            while not marker.exists() and time.time() < deadline and shell.poll() is None:
                time.sleep(0.2)
            shell.send_signal(signal.SIGINT)  # unshare and sh exec'd: this is the driver
        _, err = shell.communicate(timeout=600)
    finally:
        for pid in _session(shell.pid):  # whatever of Ray's this run left behind
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert shell.returncode == 0, err[-3000:]
    return json.loads(out.read_text())


def test_a_dead_nodes_kernel_goes_to_another_actor(tmp_path):
    found = _run(tmp_path, units=2)
    assert found["died"]
    assert found["statuses"] == ["tuned"] * 3 and found["stored"] == [True] * 3
    assert found["leases"] == ["done"] * 3
    assert any("went back to the queue" in note for note in found["notes"])


def test_with_no_actor_left_the_kernels_come_back_unfinished(tmp_path):
    found = _run(tmp_path, units=1)
    assert found["died"]
    assert found["statuses"] == ["skipped"] * 3 and found["stored"] == [False] * 3
    assert found["leases"] == ["waiting"] * 3  # the next run, or a worker, takes them up


def test_a_node_starts_from_the_winner_the_drivers_database_holds_for_another_device(tmp_path):
    """The node has no database: the driver looks up the starts for the node's device key and
    sends them with the kernel, so the stored winner is measured early (and wins here, where
    the made-up times make it ten times faster than anything else)."""
    found = _run(tmp_path, units=1, mode="starts")
    assert found["statuses"] == ["tuned"] * 3
    assert "cpu-elsewhere" in found["started_from"][0]
    assert found["started_from"][1:] == ["", ""]
    assert found["fast_config_won"]


def test_ctrl_c_keeps_what_is_stored_and_releases_the_rest(tmp_path):
    found = _run(tmp_path, units=1, mode="stalls")
    assert found["interrupted"]
    assert found["statuses"] == ["tuned", "skipped", "skipped"]
    assert found["stored"] == [True, False, False]
    assert found["leases"] == ["done", "waiting", "waiting"]
