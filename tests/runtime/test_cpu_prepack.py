"""Operands packed ahead: a kernel that receives a constant operand as the panel pack_panel
made (the whole reduce in one panel, zeros past the edges and outside masks) computes what the
numpy interpreter computes, with and without k tiles; a model's plan packs its weights once."""
from __future__ import annotations

import numpy as np
import pytest

from tests.catalogue import catalogue, random_inputs
from tests.conformance import k_tiled_configs, output_error, sample_configs, tolerance
from tunesearch.runtime.device import get_device
from tunesearch.runtime.interpret import run_kernel
from tunesearch.codegen.panels import pack_panel
from tunesearch.space.kernel_shape import packable
from tunesearch.space.spaces import space_for

DEVICE = get_device("cpu")
PACKED = [(name, kernel) for name, kernel in catalogue() if kernel.n_reduce and packable(kernel)]


def _configs(kernel, seed: int) -> list:
    space = space_for(kernel, DEVICE.info().target)
    configs = [c for c in sample_configs(space, 40, seed=seed) if c.get("pack")][:2]
    if kernel.domain[kernel.n_out] >= 3:
        configs += [c for c in k_tiled_configs(kernel, 12, seed) if c.get("pack")][:2]
    return configs


@pytest.mark.parametrize("name,kernel", PACKED, ids=[name for name, _ in PACKED])
def test_prepacked_operands_give_the_reference_result(name, kernel):
    inputs = random_inputs(kernel, seed=3)
    expected = run_kernel(kernel, inputs)
    configs = _configs(kernel, len(name))
    assert configs, "no packing config sampled"
    for config in configs:
        for index in config.get("pack"):
            out = kernel.buffers[0]  # zeros: a concatenation's piece leaves the rest so
            buffers = [DEVICE.from_numpy(np.zeros(out.size, out.dtype.np), out.dtype)]
            buffers += [DEVICE.from_numpy(a, spec.dtype)
                        for a, spec in zip(inputs, kernel.buffers[1:])]
            panel = pack_panel(kernel, config, index, inputs[index - 1])
            assert panel is not None
            buffers[index] = DEVICE.from_numpy(panel, kernel.buffers[index].dtype)
            program = DEVICE.build(kernel, config, frozenset({index}))
            assert f"pk{index} = data{index};" in program.source.text
            program(buffers)
            err = output_error(DEVICE.copyout(buffers[0]), expected)
            assert err <= tolerance(kernel), f"{name} {config} prepacked {index}: {err:.2e}"


def test_no_panel_for_an_operand_the_config_does_not_pack():
    name, kernel = PACKED[0]
    config = space_for(kernel, DEVICE.info().target).naive()
    assert pack_panel(kernel, config, packable(kernel)[0], random_inputs(kernel)[0]) is None


def test_a_plan_packs_its_weights_once():
    import tunesearch.onnx as tox
    from tests.onnx.models import onnxruntime_outputs
    from tunesearch.examples import blocks
    proto = blocks.model("odd_mlp")
    model = tox.load(proto, device="cpu")
    feeds = model.random_inputs(0)
    got = model(feeds)
    want = onnxruntime_outputs(proto, feeds)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-5)
    plan = next(iter(model._plans.values()))
    # the weight and the bias of each layer never change; the input and the hidden layer do
    assert list(model.constant_inputs(feeds).values()) == [frozenset({2, 3})] * 2
    packing = [step.program.source.text for step in plan.steps
               if 2 in step.choice.config.get("pack")]
    # the matmuls that pack their weight (the default's choice, by the target) read its
    # panel as given: no packing loop writes it per call
    assert packing
    assert all("pk2 = data2;" in t and "pk2[" in t for t in packing), packing
    assert not any("scratch(0" in t for t in packing)


def test_a_plan_chooses_each_default_knowing_its_weights():
    """The plan's defaults are those of spaces that know which inputs are weights (a row
    side's copy costs nothing per call there: space/cpu_matmul._row_copy_pays)."""
    import tunesearch.onnx as tox
    from tunesearch.examples import blocks
    model = tox.load(blocks.model("odd_mlp"), device="cpu")
    feeds = model.random_inputs(0)
    model(feeds)
    plan = next(iter(model._plans.values()))
    target = DEVICE.info().target
    constants = plan.constant_inputs()
    assert any(constants)
    for step, weights in zip(plan.steps, constants):
        assert step.choice.config == space_for(step.kernel, target, weights).default()
