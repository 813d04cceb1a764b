"""`tune --cluster`: a real Ray head, a real tune and run into one SQLite file.

Ray's servers listen on every interface, whatever address they are given, so the head runs in a
network namespace of its own (`unshare -n`: only a loopback there) and nothing outside this
machine can reach it; the test is skipped where Ray or such a namespace is not available."""
from __future__ import annotations

import json
import os
import shutil
import secrets
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra) -> dict:
    """The environment of the commands: this checkout first, and a token of Ray's own for this
    cluster (Ray would otherwise read and write ~/.ray/auth_token, which others share)."""
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32), **extra}


def groupnorm_cnn(path: Path) -> Path:
    """A small CNN with a GroupNormalization: conv, group norm, relu, conv, pool, matmul."""
    rng = np.random.default_rng(0)

    def weight(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32),
                                       name)
    inits = [weight("w1", (8, 3, 3, 3)), weight("b1", (8,)), weight("gs", (8,)),
             weight("gb", (8,)), weight("w2", (8, 8, 3, 3)), weight("fc", (8, 4))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("GroupNormalization", ["c1", "gs", "gb"], ["g1"], num_groups=2),
             helper.make_node("Relu", ["g1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["y"])]
    graph = helper.make_graph(
        nodes, "groupnorm_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def test_cluster_without_ray_says_how_to_install_it(tmp_path):
    code = ("import sys; sys.modules['ray'] = None\n"  # what an environment without Ray sees
            "from tunesearch.cli import main\n"
            f"sys.exit(main(['tune', 'example:tiny_cnn', '--cluster', 'auto', '--db', "
            f"'sqlite:///{tmp_path / 't.db'}']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "tunesearch: error: --cluster needs Ray: pip install 'tunesearch[ray]'"]


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    return subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"],
                          capture_output=True).returncode == 0


def _session(sid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        if stat and int(stat[stat.rindex(")") + 2:].split()[3]) == sid:
            pids.append(int(entry.name))
    return pids


def test_a_model_tuned_on_a_ray_cluster_runs_with_every_kernel_tuned(tmp_path):
    pytest.importorskip("ray")
    if not _namespaces_work():
        pytest.skip("no network namespace here (unshare -n) to keep Ray's servers private")
    model, db = groupnorm_cnn(tmp_path / "groupnorm_cnn.onnx"), f"sqlite:///{tmp_path / 't.db'}"
    ray = Path(sys.executable).parent / "ray"
    ray_dir = tempfile.mkdtemp(prefix="tsray-")  # short: Ray's socket paths must fit 107 bytes
    python = sys.executable
    script = textwrap.dedent(f"""\
        set -e
        ip link set lo up
        "{ray}" start --head --node-ip-address 127.0.0.1 --port 6390 --num-cpus 2 \\
            --resources '{{"tunesearch-cpu": 1}}' --include-dashboard false \\
            --disable-usage-stats --temp-dir "{ray_dir}" > "{tmp_path / 'ray.log'}" 2>&1
        "{python}" -m tunesearch tune "{model}" --cluster 127.0.0.1:6390 --trials 8 \\
            --repeat 2 --json --db "{db}" > "{tmp_path / 'tune.json'}"
        "{python}" -m tunesearch run "{model}" --json --repeat 1 --db "{db}" \\
            > "{tmp_path / 'run.json'}"
        "{python}" -m tunesearch status --json --db "{db}" > "{tmp_path / 'status.json'}"
        """)
    shell = subprocess.Popen(["unshare", "-n", "sh", "-c", script], env=_env(), cwd=tmp_path,
                             start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        _, err = shell.communicate(timeout=900)
    finally:
        for pid in _session(shell.pid):  # Ray's head and its workers: this test started them
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert shell.returncode == 0, err[-3000:]
    tuned, ran, status = (json.loads((tmp_path / name).read_text())
                          for name in ("tune.json", "run.json", "status.json"))
    # a winner that ran slower inside the model than its default is stored as the default
    # ("kept default": a timing, which a busy test machine can decide either way); both are
    # a stored result the run reads
    assert {r["status"] for r in tuned["results"]} <= {"tuned", "kept default"}
    assert ran["kernels_tuned"] == ran["kernels"] == tuned["kernels"]
    # stored under the key of the node that measured them: this machine's, here
    [device] = status["devices"]
    assert device["device_key"] == tuned["device_key"]
    assert device["done"] == device["kernels"] == len(tuned["results"])
