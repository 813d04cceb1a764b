"""Bad input through the command line, as a table: each case exits with status 2, writes one line
on stderr (no traceback) that names the problem, and leaves every file as it was.

Every case runs in a fresh process, in a folder whose files (models, databases, exports) are
hashed before and after; a case may neither change one nor create one.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tunesearch.db import Store

from tests.db.conftest import Make

TIMEOUT_S = 300


@dataclass(frozen=True)
class Case:
    """A command line (`{dir}` stands for the folder of the files) and the words its one line of
    stderr must hold; env adds environment variables (`{dir}` allowed there too)."""
    name: str
    args: tuple[str, ...]
    words: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


def _relu_model(dims) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _external_model(location: str, length: int | None = None) -> onnx.ModelProto:
    """y = x + w, with w (8 floats) stored outside the model at `location`."""
    weight = numpy_helper.from_array(np.arange(8, dtype=np.float32), "w")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"),
                       ("length", str(32 if length is None else length))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "ext", [x], [y],
                              initializer=[weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _export_with(path: Path, make: Make, **result_changes) -> None:
    """A valid-looking export whose one result has the given fields."""
    with Store(path.with_suffix(".db")) as store:
        store.record(make.kernel(), make.device(), make.result())
        store.export(path)
    path.with_suffix(".db").unlink()
    for extra in path.parent.glob(path.with_suffix("").name + ".db-*"):
        extra.unlink()
    document = json.loads(path.read_text())
    document["results"][0].update(result_changes)
    path.write_text(json.dumps(document))


def _build(folder: Path) -> None:
    make = Make()
    models = folder / "models"
    models.mkdir()
    onnx.save(_relu_model(["n", 8]), models / "dynamic.onnx")
    onnx.save(_relu_model([2, 8]), models / "fixed.onnx")
    (models / "w.bin").write_bytes(np.arange(8, dtype=np.float32).tobytes())
    (folder / "outside.bin").write_bytes(np.arange(8, dtype=np.float32).tobytes())
    onnx.save(_external_model("missing.bin"), models / "ext_missing.onnx")
    onnx.save(_external_model("../outside.bin"), models / "ext_outside.onnx")
    onnx.save(_external_model(str(folder / "outside.bin")), models / "ext_absolute.onnx")
    onnx.save(_external_model("w.bin", length=4096), models / "ext_short.onnx")
    (models / "not_a_model.onnx").write_text("hello")
    np.savez(folder / "int_inputs.npz", x=np.ones((2, 8), np.int64))
    np.savez(folder / "wrong_name.npz", z=np.ones((2, 8), np.float32))
    np.savez(folder / "wrong_shape.npz", x=np.ones((3, 8), np.float32))
    np.save(folder / "plain.npy", np.ones((2, 8), np.float32))
    (folder / "empty.npz").write_bytes(b"")
    # databases
    with Store(folder / "good.db") as store:
        store.record(make.kernel(), make.device(), make.result())
    (folder / "empty.db").write_bytes(b"")
    (folder / "corrupt.db").write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 16)
    with Store(folder / "future.db"):
        pass
    with sqlite3.connect(folder / "future.db") as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'v99_future'")
    connection.close()
    # exports
    _export_with(folder / "huge_trials.json", make, trials=10 ** 30)
    _export_with(folder / "huge_time.json", make, time_s=10 ** 400)
    _export_with(folder / "zero_time.json", make, time_s=0.0)
    _export_with(folder / "valid.json", make)
    _export_with(folder / "negative_speedup.json", make, speedup=-1.0)
    (folder / "deep.json").write_text('{"format": "tunesearch-results", "version": 1, '
                                      '"kernels": ' + "[" * 100000 + "]" * 100000 + "}")
    # a fake matplotlib that cannot be imported, as when it is not installed
    fake = folder / "no_matplotlib" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'matplotlib'\")\n")


FIXED = "{dir}/models/fixed.onnx"
DYNAMIC = "{dir}/models/dynamic.onnx"
GOOD_DB = "{dir}/good.db"

CASES = [
    # arguments, checked before any work and before any file is created
    Case("trials negative", ("tune", FIXED, "--trials", "-1"), ("--trials", "-1")),
    Case("trials zero", ("tune", FIXED, "--trials", "0"), ("--trials",)),
    Case("trials not a number", ("tune", FIXED, "--trials", "many"), ("--trials", "many")),
    Case("time budget nan", ("tune", FIXED, "--time-budget", "nan"), ("--time-budget", "nan")),
    Case("time budget negative", ("tune", FIXED, "--time-budget", "-5"), ("--time-budget",)),
    Case("patience zero", ("tune", FIXED, "--patience", "0"), ("--patience",)),
    Case("sampler bogus", ("tune", FIXED, "--sampler", "bogus"), ("bogus", "tpe")),
    Case("workers zero", ("tune", FIXED, "--workers", "0"), ("--workers",)),
    Case("repeat zero", ("run", FIXED, "--repeat", "0"), ("--repeat",)),
    Case("tune repeat negative", ("tune", FIXED, "--repeat", "-2"), ("--repeat",)),
    Case("seed negative", ("tune", FIXED, "--seed", "-1"), ("--seed",)),
    Case("seed huge", ("tune", FIXED, "--seed", str(2 ** 40)), ("--seed",)),
    Case("port out of range", ("dashboard", "--port", "70000"), ("--port",)),
    Case("unknown command", ("frobnicate",), ("frobnicate",)),
    Case("unknown device", ("run", FIXED, "--device", "tpu"), ("unknown device", "tpu")),
    # models
    Case("model missing", ("run", "{dir}/models/none.onnx"), ("not found", "none.onnx")),
    Case("model a folder", ("run", "{dir}/models"), ("models",)),
    Case("model not onnx", ("tune", "{dir}/models/not_a_model.onnx"), ("not an ONNX model",)),
    Case("example unknown", ("run", "example:nope"), ("no bundled example",)),
    Case("external data missing", ("run", "{dir}/models/ext_missing.onnx"),
         ("missing.bin", "external data")),
    Case("external data outside the folder", ("run", "{dir}/models/ext_outside.onnx"),
         ("outside.bin", "outside")),
    Case("external data absolute", ("run", "{dir}/models/ext_absolute.onnx"),
         ("outside.bin",)),
    Case("external data too short", ("run", "{dir}/models/ext_short.onnx"), ("w.bin",)),
    Case("dynamic dim unbound", ("run", DYNAMIC), ("--input-shape",)),
    Case("input shape negative", ("run", DYNAMIC, "--input-shape", "x=-2x8"), ("-2x8",)),
    Case("input shape garbage", ("run", DYNAMIC, "--input-shape", "x=axb"), ("--input-shape",)),
    Case("input shape huge", ("run", DYNAMIC, "--input-shape", "x=1000000000000x8"),
         ("'x'", "elements")),
    Case("input shape past numpy", ("tune", DYNAMIC, "--input-shape", "x=" + "9" * 30 + "x8"),
         ("'x'", "elements")),
    Case("input shape unknown name", ("run", DYNAMIC, "--input-shape", "q=2x8"), ("'q'",)),
    Case("input shape wrong rank", ("run", FIXED, "--input-shape", "x=2x8x1"), ("'x'",)),
    # inputs and outputs of run
    Case("inputs of the wrong dtype", ("run", FIXED, "--inputs", "{dir}/int_inputs.npz"),
         ("'x'", "int64", "float32")),
    Case("inputs missing a name", ("run", FIXED, "--inputs", "{dir}/wrong_name.npz"),
         ("missing",)),
    Case("inputs of the wrong shape", ("run", FIXED, "--inputs", "{dir}/wrong_shape.npz"),
         ("'x'", "shape")),
    Case("inputs not npz", ("run", FIXED, "--inputs", "{dir}/plain.npy"), ("plain.npy",)),
    Case("inputs empty file", ("run", FIXED, "--inputs", "{dir}/empty.npz"), ("empty.npz",)),
    Case("inputs missing file", ("run", FIXED, "--inputs", "{dir}/none.npz"), ("none.npz",)),
    Case("outputs into a missing folder", ("run", FIXED, "--outputs", "{dir}/no/such/out.npz"),
         ("no/such",)),
    Case("outputs empty", ("run", FIXED, "--outputs", ""), ("--outputs", "empty")),
    Case("tune into memory", ("tune", FIXED, "--db", "sqlite://"), ("in-memory", "sqlite:///")),
    Case("tune into memory by the setting", ("tune", FIXED), ("in-memory",),
         {"TUNESEARCH_DB": "sqlite:///:memory:"}),
    Case("outputs to a full device", ("run", FIXED, "--db", GOOD_DB, "--outputs", "/dev/full"),
         ("/dev/full", "No space")),
    # settings
    Case("threads zero", ("run", FIXED), ("TUNESEARCH_THREADS",), {"TUNESEARCH_THREADS": "0"}),
    Case("threads negative", ("tune", FIXED), ("TUNESEARCH_THREADS",),
         {"TUNESEARCH_THREADS": "-4"}),
    Case("threads not a number", ("run", FIXED), ("TUNESEARCH_THREADS",),
         {"TUNESEARCH_THREADS": "lots"}),
    Case("graph path into a missing folder", ("run", FIXED, "--db", GOOD_DB), ("GRAPH_PATH",),
         {"GRAPH": "1", "GRAPH_PATH": "{dir}/no/such/graph.dot"}),
    Case("debug not a number", ("run", FIXED, "--db", GOOD_DB), ("DEBUG",), {"DEBUG": "verbose"}),
    Case("debug below 0", ("run", FIXED, "--db", GOOD_DB), ("DEBUG", "0 to 4"), {"DEBUG": "-1"}),
    Case("debug above 4", ("db", "ls", "--db", GOOD_DB), ("DEBUG", "0 to 4"), {"DEBUG": "99"}),
    Case("nodb negative", ("devices",), ("TUNESEARCH_NODB", "0 to 1"), {"TUNESEARCH_NODB": "-1"}),
    Case("graph 7", ("report", "--db", GOOD_DB), ("GRAPH", "0 to 1"), {"GRAPH": "7"}),
    Case("spin beyond its range", ("devices",), ("TUNESEARCH_OMP_SPIN",),
         {"TUNESEARCH_OMP_SPIN": str(1 << 31)}),
    Case("cache under a file", ("run", FIXED), ("cache",),
         {"TUNESEARCH_CACHE": "{dir}/good.db/cache"}),
    # databases given to run: --db and TUNESEARCH_DB follow the same rule
    Case("run corrupt --db", ("run", FIXED, "--db", "{dir}/corrupt.db"), ("corrupt.db",)),
    Case("run corrupt TUNESEARCH_DB", ("run", FIXED), ("corrupt.db",),
         {"TUNESEARCH_DB": "{dir}/corrupt.db"}),
    Case("run empty --db", ("run", FIXED, "--db", "{dir}/empty.db"), ("empty.db",)),
    Case("run missing --db", ("run", FIXED, "--db", "{dir}/none.db"),
         ("none.db", "TUNESEARCH_NODB=1", "creates it")),
    Case("run unreachable server", ("run", FIXED),
         ("cannot connect",), {"TUNESEARCH_DB": "postgresql://nobody@127.0.0.1:1/none"}),
    # databases given to tune: refused before the search
    Case("tune into a newer schema", ("tune", FIXED, "--db", "{dir}/future.db"),
         ("future.db", "newer")),
    Case("tune into a read-only database",
         ("tune", FIXED, "--db", "sqlite:///file:{dir}/good.db?mode=ro&uri=true"),
         ("read-only",)),
    Case("tune into a corrupt database", ("tune", FIXED), ("corrupt.db",),
         {"TUNESEARCH_DB": "{dir}/corrupt.db"}),
    # db commands
    Case("ls empty file", ("db", "ls", "--db", "{dir}/empty.db"), ("empty.db", "empty")),
    Case("show empty file", ("db", "show", "k_", "--db", "{dir}/empty.db"), ("empty.db",)),
    Case("stats empty file", ("db", "stats", "--db", "{dir}/empty.db"), ("empty.db",)),
    Case("ls missing file", ("db", "ls", "--db", "{dir}/none.db"), ("none.db",)),
    Case("ls corrupt file", ("db", "ls", "--db", "{dir}/corrupt.db"), ("corrupt.db",)),
    Case("ls bad url", ("db", "ls", "--db", "mysql://x/y"), ("mysql",)),
    Case("show unknown key", ("db", "show", "zz", "--db", GOOD_DB), ("'zz'",)),
    Case("export into a missing folder", ("db", "export", "{dir}/no/such/x.json", "--db", GOOD_DB),
         ("no/such",)),
    Case("export onto a folder", ("db", "export", "{dir}/models", "--db", GOOD_DB),
         ("models", "not a regular file")),
    Case("export from an empty file", ("db", "export", "{dir}/x.json", "--db", "{dir}/empty.db"),
         ("empty.db",)),
    Case("import huge integer", ("db", "import", "{dir}/huge_trials.json", "--db", GOOD_DB),
         ("huge_trials.json", "trials")),
    Case("import huge time", ("db", "import", "{dir}/huge_time.json", "--db", GOOD_DB),
         ("huge_time.json", "time_s")),
    Case("import zero time", ("db", "import", "{dir}/zero_time.json", "--db", GOOD_DB),
         ("zero_time.json", "time_s")),
    Case("import negative speedup", ("db", "import", "{dir}/negative_speedup.json", "--db",
                                     GOOD_DB), ("negative_speedup.json", "speedup")),
    Case("import deep json", ("db", "import", "{dir}/deep.json", "--db", GOOD_DB),
         ("deep.json",)),
    Case("import missing file", ("db", "import", "{dir}/none.json", "--db", GOOD_DB),
         ("none.json",)),
    Case("import a folder", ("db", "import", "{dir}/models", "--db", GOOD_DB), ("models",)),
    Case("import a model", ("db", "import", FIXED, "--db", GOOD_DB), ("fixed.onnx",)),
    # a valid file: the file is checked before the database is opened
    Case("import into a newer schema", ("db", "import", "{dir}/valid.json", "--db",
                                        "{dir}/future.db"), ("future.db",)),
    Case("merge missing file", ("db", "merge", "{dir}/none.db", "--db", GOOD_DB), ("none.db",)),
    Case("merge empty file", ("db", "merge", "{dir}/empty.db", "--db", GOOD_DB), ("empty.db",)),
    Case("merge corrupt file", ("db", "merge", "{dir}/corrupt.db", "--db", GOOD_DB),
         ("corrupt.db",)),
    Case("prune unseen days huge", ("db", "prune", "--unseen-days", "1e300", "--db", GOOD_DB),
         ("--unseen-days",)),
    Case("prune unseen days nan", ("db", "prune", "--unseen-days", "nan", "--db", GOOD_DB),
         ("--unseen-days",)),
    Case("prune unseen days negative", ("db", "prune", "--unseen-days", "-1", "--db", GOOD_DB),
         ("--unseen-days",)),
    Case("prune space version huge", ("db", "prune", "--space-version-below", str(2 ** 70),
                                      "--db", GOOD_DB), ("--space-version-below",)),
    Case("prune nothing asked", ("db", "prune", "--db", GOOD_DB), ("--space-version-below",)),
    Case("upgrade a newer schema", ("db", "upgrade", "--db", "{dir}/future.db"),
         ("upgrade tunesearch",)),
    Case("upgrade a corrupt file", ("db", "upgrade", "--db", "{dir}/corrupt.db"),
         ("corrupt.db",)),
    # report and status
    Case("report plot without matplotlib", ("report", "--db", GOOD_DB, "--plot", "{dir}/r.png"),
         ("matplotlib", "pip install"), {"PYTHONPATH": "{dir}/no_matplotlib"}),
    Case("report plot into a missing folder",
         ("report", "--db", GOOD_DB, "--plot", "{dir}/no/such/r.png"), ("no/such",)),
    Case("report plot as text", ("report", "--db", GOOD_DB, "--plot", "{dir}/r.txt"),
         ("r.txt", ".png")),
    Case("report plot without a suffix", ("report", "--db", GOOD_DB, "--plot", "/dev/full"),
         ("/dev/full", ".png")),
    Case("report plot empty", ("report", "--db", GOOD_DB, "--plot", ""), ("--plot", "empty")),
    Case("report empty file", ("report", "--db", "{dir}/empty.db"), ("empty.db",)),
    Case("report corrupt file", ("report", "--db", "{dir}/corrupt.db"), ("corrupt.db",)),
    Case("status empty file", ("status", "--db", "{dir}/empty.db"), ("empty.db",)),
    Case("status missing file", ("status", "--db", "{dir}/none.db"), ("none.db",)),
]


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()
            and "__pycache__" not in path.parts}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bad_input")
    _build(folder)
    return folder


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_input_is_one_line_exit_2_and_changes_no_file(files, tmp_path, case):
    before = _snapshot(files)
    env = {key: value for key, value in os.environ.items()
           if key not in ("DEBUG", "GRAPH", "TUNESEARCH_DB", "TUNESEARCH_NODB", "TUNESEARCH_TUNE",
                          "TUNESEARCH_THREADS")}
    env["TUNESEARCH_DB"] = str(files / "default.db")  # must not be created either
    env["TUNESEARCH_CACHE"] = str(tmp_path / "cache")
    env.update({key: value.format(dir=files) for key, value in case.env.items()})
    if "PYTHONPATH" in case.env:
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], os.environ.get("PYTHONPATH", ""),
                                             str(Path(__file__).parents[2])])
    args = [arg.format(dir=files) for arg in case.args]
    proc = subprocess.run([sys.executable, "-m", "tunesearch", *args], capture_output=True,
                          text=True, env=env, timeout=TIMEOUT_S, cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for word in case.words:
        assert word in lines[0], (word, lines[0])
    assert "internal error" not in lines[0]
    assert _snapshot(files) == before
    assert proc.stdout == "", proc.stdout[-2000:]


def _cli(*args: str, env: dict | None = None, cwd: Path | None = None
         ) -> subprocess.CompletedProcess:
    full_env = {key: value for key, value in os.environ.items()
                if key not in ("DEBUG", "GRAPH", "TUNESEARCH_DB", "TUNESEARCH_NODB")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "tunesearch", *args], capture_output=True,
                          text=True, env=full_env, timeout=TIMEOUT_S, cwd=cwd)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_store_failure_during_tune_ends_non_zero_with_a_count(tmp_path, workers):
    model = tmp_path / "relu.onnx"
    onnx.save(_relu_model([2, 8]), model)
    path = tmp_path / "full.db"
    Store(path).close()
    with sqlite3.connect(path) as connection:  # the disk fills up after the tune has started
        connection.execute("CREATE TRIGGER full BEFORE INSERT ON results "
                           "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
    connection.close()
    proc = _cli("tune", str(model), "--db", str(path), "--trials", "2", "--repeat", "1",
                "--quiet", "--workers", workers)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "1 of 1 kernel result(s) were not saved" in lines[0] and str(path) in lines[0]
    assert "disk is full" in lines[0]
    assert "E_2_8" in proc.stdout  # what was found is still shown
    with Store(path, readonly=True) as store:
        assert store.list_results() == []


def _tampered(folder: Path, make: Make) -> tuple[Path, str]:
    """A database with one good result, one whose config is JSON nested 100000 deep, and a
    device whose fingerprint is nested as deeply; returns it and the good kernel's key."""
    path = folder / "tampered.db"
    with Store(path) as store:
        store.record(make.kernel(1), make.device(), make.result())
        store.record(make.kernel(2), make.device(1), make.result())
    deep = "[" * 100000 + "]" * 100000
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE results SET config = ? WHERE kernel_id = "
                           "(SELECT id FROM kernels WHERE key = ?)",
                           ('{"knobs": ' + deep + "}", make.kernel(2).key))
        connection.execute("UPDATE devices SET fingerprint = ? WHERE key = ?",
                           ('{"isa": ' + deep + "}", make.device(1).key))
    connection.close()
    return path, make.kernel(1).key


@pytest.mark.parametrize("args", [("db", "ls"), ("db", "show", "k_"), ("db", "stats"),
                                  ("db", "export", "{dir}/out.json"), ("report",),
                                  ("report", "--json"), ("status",)])
def test_tampered_rows_are_ignored_by_every_reading_command(tmp_path, args):
    path, good_key = _tampered(tmp_path, Make())
    before = path.read_bytes()
    proc = _cli(*[arg.format(dir=tmp_path) for arg in args], "--db", str(path),
                env={"COLUMNS": "250"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert all(line.startswith("ignoring a stored result") for line in
               proc.stderr.strip().splitlines()), proc.stderr
    assert path.read_bytes() == before
    if args[-1].endswith("out.json"):
        exported = json.loads((tmp_path / "out.json").read_text())
        assert [r["kernel"] for r in exported["results"]] == [good_key]
    elif args[0] == "db" and args[1] in ("ls", "show"):
        assert good_key[:12] in proc.stdout


def test_a_zero_size_dimension_runs_to_empty_outputs_like_onnxruntime(tmp_path):
    import onnxruntime
    model = tmp_path / "dynamic.onnx"
    onnx.save(_relu_model(["n", 8]), model)
    out = tmp_path / "out.npz"
    proc = _cli("run", str(model), "--input-shape", "x=0x8", "--outputs", str(out),
                env={"TUNESEARCH_NODB": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    [expected] = session.run(None, {"x": np.zeros((0, 8), np.float32)})
    with np.load(out) as outputs:
        assert outputs["y"].shape == expected.shape == (0, 8)
        assert outputs["y"].dtype == expected.dtype
    tune = _cli("tune", str(model), "--input-shape", "x=0x8", "--db", str(tmp_path / "r.db"),
                "--trials", "2", "--repeat", "1", "--json")
    assert tune.returncode == 0, tune.stderr[-3000:]
    assert json.loads(tune.stdout)["results"] == []  # nothing to compute, nothing to tune
