"""Bad input of the second round through the command line: models whose data disagrees with what
they declare, inputs that cannot fit in memory, paths the system or the database cannot take and
settings out of range. Each case exits with status 2, writes one line on stderr that names the
problem, prints nothing on stdout and leaves every file in its folder as it was."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

TIMEOUT_S = 300
SURROGATE = os.fsdecode(b"\xff\xfe")  # bytes that are not UTF-8, as Python keeps them
LONG = "a" * 300  # longer than any file system's name


def _model(nodes, initializers=(), opsets=(("", 17),), outputs=("y",),
           inputs=(("x", [8]),)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        initializer=list(initializers))
    return helper.make_model(graph, ir_version=8,
                             opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def _build(folder: Path) -> None:
    relu = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    add = [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    raw = np.arange(8, dtype=np.float32).tobytes()
    models = {
        "fine": _model(relu),
        "dynamic": _model(relu, inputs=(("x", ["n", 4]),)),
        "short_raw": _model(add, [TensorProto(name="w", data_type=1, dims=[8], raw_data=raw[:12])]),
        "long_raw": _model(add, [TensorProto(name="w", data_type=1, dims=[8],
                                             raw_data=raw + raw)]),
        "no_data": _model(add, [TensorProto(name="w", data_type=1, dims=[10 ** 6, 10 ** 6])]),
        "unproduced": _model(relu, outputs=("y", "z")),
        "written_twice": _model(relu + [helper.make_node("Neg", ["x"], ["y"], name="neg")]),
        "opset0": _model(relu, opsets=(("", 0),)),
        "opset_negative": _model(relu, opsets=(("", -1),)),
        "opset999": _model(relu, opsets=(("", 999),)),
        "no_opset": _model(relu, opsets=()),
        "many_huge_inputs": _model(
            [helper.make_node("Relu", [f"x{i}"], [f"y{i}"]) for i in range(64)],
            outputs=[f"y{i}" for i in range(64)],
            inputs=[(f"x{i}", [500000000, 4]) for i in range(64)]),
    }
    weight = numpy_helper.from_array(np.arange(8, dtype=np.float32), "w")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", "16")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    models["external_range_short"] = _model(add, [weight])
    (folder / "w.bin").write_bytes(raw)
    _archive_declaring(folder / "huge_inputs.npz", (200000, 100000))
    for name, proto in models.items():
        (folder / f"{name}.onnx").write_bytes(proto.SerializeToString())


def _archive_declaring(path: Path, shape: tuple[int, ...]) -> None:
    """An .npz archive of a few bytes whose array declares `shape` (74.5 GiB of float32)."""
    import io
    import zipfile
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": shape})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", header.getvalue() + bytes(1 << 16))


M = "{dir}/fine.onnx"
CASES = [
    # models that disagree with what they declare
    ("raw data short", ("run", "{dir}/short_raw.onnx"), ("'w'", "12 bytes"), {}),
    ("raw data long", ("run", "{dir}/long_raw.onnx"), ("'w'", "64 bytes"), {}),
    ("no data for 10^12 elements", ("tune", "{dir}/no_data.onnx"), ("'w'", "no data"), {}),
    ("output nothing produces", ("run", "{dir}/unproduced.onnx"), ("'z'",), {}),
    ("two nodes write one value", ("run", "{dir}/written_twice.onnx"), ("'y'", "'neg'"), {}),
    ("opset 0", ("run", "{dir}/opset0.onnx"), ("opset 0",), {}),
    ("opset negative", ("tune", "{dir}/opset_negative.onnx"), ("opset -1",), {}),
    ("opset 999", ("run", "{dir}/opset999.onnx"), ("opset 999",), {}),
    ("no opset", ("run", "{dir}/no_opset.onnx"), ("opset",), {}),
    ("external range shorter than the tensor", ("run", "{dir}/external_range_short.onnx"),
     ("'w'", "16 bytes"), {}),
    ("input shape given twice", ("run", "{dir}/dynamic.onnx", "--input-shape", "x=2x4",
                                 "--input-shape", "x=3x4"), ("--input-shape", "'x'"), {}),
    ("inputs past memory", ("run", "{dir}/many_huge_inputs.onnx"), ("memory", "GiB"), {}),
    ("npz declaring a huge array", ("run", M, "--inputs", "{dir}/huge_inputs.npz"),
     ("'x'", "(200000, 100000)"), {}),
    # paths the system or the database cannot take
    ("db not UTF-8", ("run", M, "--db", "{dir}/" + SURROGATE + ".db"), ("--db", "UTF-8"), {}),
    ("db name too long", ("db", "ls", "--db", "{dir}/" + LONG + ".db"), ("--db", "longer"), {}),
    ("merge name too long", ("db", "merge", "{dir}/" + LONG + ".db", "--db", "{dir}/x.db"),
     ("longer",), {}),
    ("TUNESEARCH_DB not UTF-8", ("run", M), ("TUNESEARCH_DB", "UTF-8"),
     {"TUNESEARCH_DB": "{dir}/" + SURROGATE + ".db"}),
    ("cache not UTF-8", ("run", M), ("TUNESEARCH_CACHE", "UTF-8"),
     {"TUNESEARCH_CACHE": "{dir}/" + SURROGATE}),
    ("cache name too long", ("run", M), ("TUNESEARCH_CACHE", "longer"),
     {"TUNESEARCH_CACHE": "{dir}/" + LONG}),
    ("outputs name too long", ("run", M, "--outputs", "{dir}/" + LONG + ".npz"),
     ("--outputs", "longer"), {}),
    ("model name too long", ("run", "{dir}/" + LONG + ".onnx"), ("model", "longer"), {}),
    ("graph path too long", ("run", M), ("GRAPH_PATH", "longer"),
     {"GRAPH": "1", "GRAPH_PATH": "{dir}/" + LONG + ".dot"}),
    ("plot name too long", ("report", "--plot", "{dir}/" + LONG + ".png"), ("--plot", "longer"),
     {}),
    # settings out of range
    ("spin negative", ("run", M), ("TUNESEARCH_OMP_SPIN",), {"TUNESEARCH_OMP_SPIN": "-5"}),
    ("tune on miss huge", ("run", M), ("TUNESEARCH_TUNE",), {"TUNESEARCH_TUNE": str(2 ** 40)}),
    ("device unknown", ("devices",), ("TUNESEARCH_DEVICE", "tpu"), {"TUNESEARCH_DEVICE": "tpu"}),
]


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("declared")
    _build(folder)
    return folder


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_bad_input_is_one_line_exit_2_and_changes_no_file(files, tmp_path, case):
    _, args, words, extra = case
    before = _snapshot(files)
    env = {key: value for key, value in os.environ.items()
           if key not in ("DEBUG", "GRAPH", "TUNESEARCH_DB", "TUNESEARCH_NODB", "TUNESEARCH_TUNE",
                          "TUNESEARCH_DEVICE", "TUNESEARCH_OMP_SPIN")}
    env["TUNESEARCH_DB"] = str(files / "default.db")  # must not be created either
    env["TUNESEARCH_CACHE"] = str(tmp_path / "cache")
    env.update({key: value.format(dir=files) for key, value in extra.items()})
    proc = subprocess.run([sys.executable, "-m", "tunesearch",
                           *[arg.format(dir=files) for arg in args]],
                          capture_output=True, text=True, errors="backslashreplace", env=env,
                          timeout=TIMEOUT_S, cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "internal error" not in lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert proc.stdout == ""
    assert _snapshot(files) == before
