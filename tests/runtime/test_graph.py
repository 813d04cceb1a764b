"""GRAPH=1 and DEBUG=2..4 on a model run through the CLI, and on a Tensor program: the .dot file
is parsed and held against the model's schedule, the DEBUG lines and onnxruntime's outputs."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tunesearch.onnx as tox
from tests.onnx.models import onnxruntime_outputs
from tunesearch.cli import resolve_model
from tunesearch.db import DeviceRecord, KernelRecord, ResultRecord, Store
from tunesearch.runtime.device import get_device
from tunesearch.space.config import SPACE_VERSION
from tunesearch.space.spaces import space_for

ATTR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^,\s\]]+)')


def parse_dot(text: str) -> tuple[dict[str, dict], list[tuple[str, str, dict]]]:
    """The nodes {id: attributes} and edges [(from, to, attributes)] of a DOT file written by
    tunesearch (one statement a line), with string values unquoted."""
    def attrs(body: str) -> dict:
        out = {}
        for key, value in ATTR.findall(body):
            if value.startswith('"'):
                value = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1),
                               value[1:-1])
            out[key] = value
        return out
    nodes, edges = {}, []
    for line in text.splitlines():
        if m := re.fullmatch(r"\s*(\w+) -> (\w+) \[(.*)\];", line):
            edges.append((m.group(1), m.group(2), attrs(m.group(3))))
        elif m := re.fullmatch(r"\s*(\w+) \[(.*)\];", line):
            if m.group(1) not in ("node", "edge"):
                nodes[m.group(1)] = attrs(m.group(2))
    return nodes, edges


def kernel_nodes(nodes: dict) -> list[dict]:
    """The kernel boxes, in the order the kernels ran (k0, k1, ...)."""
    ids = sorted((n for n in nodes if re.fullmatch(r"k\d+", n)), key=lambda n: int(n[1:]))
    assert ids == [f"k{i}" for i in range(len(ids))]
    return [nodes[n] for n in ids]


def test_graph_and_debug_through_the_cli_on_a_model(tmp_path):
    path = resolve_model("example:tiny_cnn")
    model = tox.load(path, device="cpu")
    items = model.schedule()
    # one kernel has a stored config: it must be drawn (and printed) as tuned, the rest default
    heavy = max(items, key=lambda item: item.kernel.flops).kernel
    device = get_device("cpu")
    info = device.info()
    config = json.loads(space_for(heavy, info.target).default().to_json())
    db = f"sqlite:///{tmp_path / 'r.db'}"
    with Store(db) as store:
        store.record(KernelRecord(heavy.key, heavy.name, heavy.canonical(), heavy.ops_summary(),
                                  str(heavy.domain), SPACE_VERSION),
                     DeviceRecord(info.key, info.backend, info.name, info.as_dict()),
                     ResultRecord(config=config, time_s=1e-5, spread=0.0, gflops=1.0, gbps=1.0,
                                  default_time_s=2e-5, speedup=2.0, trials=1, sampler="test"))
    feeds = model.random_inputs(seed=3)
    np.savez(tmp_path / "in.npz", **feeds)
    env = dict(os.environ, GRAPH="1", GRAPH_PATH=str(tmp_path / "g.dot"), DEBUG="4")
    proc = subprocess.run([sys.executable, "-m", "tunesearch", "run", str(path), "--db", db,
                           "--inputs", str(tmp_path / "in.npz"), "--outputs",
                           str(tmp_path / "out.npz"), "--repeat", "2"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]

    # the outputs are still right
    with np.load(tmp_path / "out.npz") as out:
        for name, want in onnxruntime_outputs(model.proto, feeds).items():
            np.testing.assert_allclose(out[name], want, rtol=1e-3, atol=1e-5)

    nodes, edges = parse_dot((tmp_path / "g.dot").read_text())
    boxes = kernel_nodes(nodes)
    # every kernel of one call, in run order (the profile's calls are not drawn)
    assert [b["label"].split("\n")[0] for b in boxes] == \
        [f"#{i + 1} {item.kernel.name}" for i, item in enumerate(items)]
    # an edge for every buffer a kernel wrote and a later kernel read, and no other
    writer = {id(item.out): i for i, item in enumerate(items)}
    want = {(writer[id(n)], i) for i, item in enumerate(items) for n in item.inputs
            if id(n) in writer}
    drawn = {(int(a[1:]), int(b[1:])) for a, b, attrs in edges
             if a[0] == b[0] == "k" and attrs.get("style") != "invis"}
    assert drawn == want
    assert ("k0", "k1", {"style": "invis"}) in edges  # boxes kept in run order
    for a, b, attrs in edges:
        if a[0] == b[0] == "k" and attrs.get("style") != "invis":
            k = items[int(a[1:])].kernel
            assert attrs["label"].endswith(f"float32 {'x'.join(map(str, k.out_shape))}")
    # the model's input feeds the first kernel, its output leaves the last
    sources = {a: nodes[a]["label"] for a, b, _ in edges if b == "k0" and a.startswith("h")}
    assert any(label.startswith("input 'input' 1x3x32x32") for label in sources.values())
    outputs = [(a, nodes[b]["label"]) for a, b, _ in edges if b.startswith("o")]
    assert outputs == [(f"k{len(items) - 1}", "output 'probabilities' 1x10")]

    # labels: time and tuned/default, the same numbers DEBUG=2 printed for the same call
    lines = [ln for ln in proc.stderr.splitlines() if " GFLOPS " in ln and " launch " in ln]
    assert len(lines) == len(items), proc.stderr[-3000:]
    for item, box, line in zip(items, boxes, lines):
        tuned = item.kernel.key == heavy.key
        name, time_text, gflops_text = box["label"].split("\n")
        m = re.fullmatch(r"([\d.]+) us  (tuned|default)", time_text)
        assert m and float(m.group(1)) > 0
        assert m.group(2) == ("tuned" if tuned else "default")
        assert box["fillcolor"] == ("#b7e4c7" if tuned else "#e9ecef")
        assert line.split()[1] == item.kernel.name
        assert f" {m.group(1)} us " in line and line.endswith(m.group(2))
    # DEBUG=3: each kernel's config, the stored one for the tuned kernel
    configs = [ln.strip() for ln in proc.stderr.splitlines() if ln.startswith("    config: ")]
    assert len(configs) == len(items)
    heavy_at = next(i for i, item in enumerate(items) if item.kernel.key == heavy.key)
    assert configs[heavy_at] == f"config: {space_for(heavy, info.target).default()}"
    # DEBUG=4: the source of every kernel
    for item in items:
        assert f"void {item.kernel.name}(" in proc.stderr
    # one line says where the drawing is, and how to render it where Graphviz is missing
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("GRAPH=1: wrote")]
    assert len(said) == 1
    if shutil.which("dot"):
        assert (tmp_path / "g.png").stat().st_size > 0 and (tmp_path / "g.svg").exists()
    else:
        assert f"dot -Tsvg {tmp_path / 'g.dot'} -o {tmp_path / 'g.svg'}" in said[0]


TENSOR_PROGRAM = """
import numpy as np
from tunesearch import Tensor
x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
y = (x * 2).sum(1)
print(y.numpy().tolist())
print(((y + 1) * y).numpy().tolist())
"""


def test_graph_of_a_tensor_program_without_dot(tmp_path):
    """Kernels add up over the realizes of a program (the second reads the first's buffer);
    without `dot` on the PATH one line says how to render the file."""
    (tmp_path / "bin").mkdir()
    env = dict(os.environ, GRAPH="1", GRAPH_PATH=str(tmp_path / "g.dot"), TUNESEARCH_NODB="1",
               TUNESEARCH_DEVICE="reference", PATH=str(tmp_path / "bin"))
    proc = subprocess.run([sys.executable, "-c", TENSOR_PROGRAM], capture_output=True, text=True,
                          env=env, timeout=300, check=True)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = (x * 2).sum(1)
    assert proc.stdout.split("\n")[:2] == [str(y.tolist()), str(((y + 1) * y).tolist())]
    nodes, edges = parse_dot((tmp_path / "g.dot").read_text())
    boxes = kernel_nodes(nodes)
    assert len(boxes) == 2
    assert ("k0", "k1") in {(a, b) for a, b, attrs in edges if attrs.get("label")}
    assert "2 kernels on reference" in (tmp_path / "g.dot").read_text()
    said = [ln for ln in proc.stderr.splitlines() if "GRAPH=1" in ln]
    assert said == [f"GRAPH=1: wrote {tmp_path / 'g.dot'}; Graphviz's `dot` is not installed "
                    f"(apt install graphviz, brew install graphviz), then: dot -Tsvg "
                    f"{tmp_path / 'g.dot'} -o {tmp_path / 'g.svg'}"]
    assert not (tmp_path / "g.svg").exists()


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_graphviz_reads_the_drawing(tmp_path):
    """Graphviz itself parses the file: as many kernel boxes as the DOT text has."""
    env = dict(os.environ, GRAPH="1", GRAPH_PATH=str(tmp_path / "g.dot"), TUNESEARCH_NODB="1",
               TUNESEARCH_DEVICE="reference")
    subprocess.run([sys.executable, "-c", TENSOR_PROGRAM], env=env, timeout=300, check=True,
                   capture_output=True)
    plain = subprocess.run(["dot", "-Tplain", str(tmp_path / "g.dot")], capture_output=True,
                           text=True, check=True).stdout
    drawn = [ln.split()[1] for ln in plain.splitlines() if ln.startswith("node ")]
    assert sorted(n for n in drawn if n.startswith("k")) == ["k0", "k1"]
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
