"""Tuning a model is one library call: its kernels searched for real on the CPU into a real
SQLite file, the model timed both ways, and the model running the stored configs afterwards.
The command line's `tune` (tests/cli) prints what this returns."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tunesearch.db import Store
from tunesearch.onnx import load
from tunesearch.search import Budget, ModelTuning, tune_model


def _proto():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((48, 32), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 48])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _check(tuned: ModelTuning, store: Store, model) -> None:
    assert tuned.report.results and all(r.status in ("tuned", "stored", "single")
                                        for r in tuned.report.results)
    for r in tuned.report.results:
        if r.status == "tuned":
            assert store.lookup(r.kernel_key, tuned.report.device_key) is not None
    assert set(tuned.kept_default) <= {r.kernel_key for r in tuned.report.results}
    assert tuned.comparison.before_s > 0 and tuned.comparison.after_s > 0
    assert set(tuned.default_times) >= {r.kernel_key for r in tuned.report.results}
    x = np.random.default_rng(1).standard_normal((16, 48), dtype=np.float32)
    w = numpy_helper.to_array(model.proto.graph.initializer[0])
    np.testing.assert_allclose(model(x=x)["y"], np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)
    assert model.profile(model.random_inputs(), repeat=1).n_tuned >= 1


def test_a_model_from_memory_is_tuned_and_timed_in_this_process(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    model = load(_proto())
    assert model.recipe is None
    tuned = tune_model(model, "cpu", Budget(trials=3), store=store, progress=False, repeat=2)
    _check(tuned, store, model)
    assert tuned.comparison.before_by_process == ()  # one process: this one


def test_a_model_from_a_file_is_timed_in_fresh_processes(tmp_path):
    path = tmp_path / "mlp.onnx"
    path.write_bytes(_proto().SerializeToString())
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    model = load(str(path))
    tuned = tune_model(model, "cpu", Budget(trials=3), store=store, progress=False, repeat=2,
                       processes=2)
    _check(tuned, store, model)
    assert len(tuned.comparison.before_by_process) == 2
