"""Real measurement on the CPU: planted faults fail their trials, winners are verified.

The faulty-candidate suite: a candidate that segfaults, hangs, computes a wrong value, writes one
element past the end of its output, one before its start, or into an input is rejected with its
reason; the runner starts again cleanly, and the tuner goes on to a correct winner."""
from __future__ import annotations

import platform

import numpy as np
import pytest

from tests.search import faulty
from tests.search.kernels import add, matmul
from tunesearch.db import Store
from tunesearch.graph.dtypes import dtypes
from tunesearch.runtime.device import get_device
from tunesearch.search import Budget, DeviceMeasurer, tune_kernels
from tunesearch.search import verify
from tunesearch.search.measure import from_memory
from tunesearch.space.spaces import space_for

EXPECTED = {faulty.CRASH: ("crash", "SIGSEGV"), faulty.HANG: ("timeout", "hard limit"),
            faulty.WRONG: ("wrong", "differ from the reference"),
            # the output ends at a guard page; the input is mapped read-only
            faulty.PAST_END: ("crash", "SIGSEGV: an access out of bounds"),
            # the canary in front of the output (the part of its first page it does not fill)
            faulty.BEFORE_START: ("crash", "wrote out of bounds: wrote before the start"),
            faulty.INTO_INPUT: ("crash", "SIGSEGV: an access out of bounds")}


@pytest.fixture(scope="module")
def faulty_space(faulty_device):
    kernel = add(64)
    space = space_for(kernel, get_device(faulty_device).info().target)
    blocks = {c.get("upcast")[-1] for c in space.enumerate()}
    assert set(EXPECTED) < blocks and space.default().get("upcast")[-1] not in EXPECTED
    return kernel, space


def test_each_planted_fault_fails_its_trial_with_its_reason(faulty_space):
    kernel, space = faulty_space
    configs = list(space.enumerate())
    with DeviceMeasurer(faulty.NAME, timeout_s=2.0) as measurer:
        [default] = measurer.measure(kernel, [space.default()])
        assert default.ok and default.max_error == 0.0
        results = measurer.measure(kernel, configs)
        for result in results:
            block = result.config.get("upcast")[-1]
            if block in EXPECTED:
                kind, words = EXPECTED[block]
                assert (result.error, result.time_s) == (kind, None), result
                assert words in result.message
            else:
                assert result.ok and result.time_s > 0 and result.max_error == 0.0, result
        wrong = next(r for r in results if r.config.get("upcast") == (faulty.WRONG,))
        assert wrong.max_error == pytest.approx(1.0, rel=1e-3)  # the planted += 1
        [again] = measurer.retime(kernel, [space.default()])  # the restarted runner process works
        assert again.ok and again.max_error == 0.0
        # after the segfault, the hang, the write past the end and the write into the input
        assert measurer.runner.restarts == 4


def test_finalists_are_retimed_in_rounds_each_round_in_another_order():
    """A slow phase of the machine falls on several finalists alike: each is timed in blocks
    over three rounds, the order turned by one each round, and its time is the median round."""
    kernel = matmul(24, 32, 40)
    space = space_for(kernel, get_device("cpu").info().target)
    a, b = list(space.enumerate())[:2]
    with DeviceMeasurer("cpu") as measurer:
        order = []
        run = measurer.runner.run

        def recording(request):
            order.append(request.config)
            return run(request)
        measurer.runner.run = recording
        first, second = measurer.retime(kernel, [a, b])
    assert order == [a, b, b, a, a, b]
    assert first.ok and second.ok and first.max_error is not None
    # each round a share of the final timing: 3 of its 7 repeats at least, 9 in all
    assert first.repeats >= 9 and second.repeats >= 9


@pytest.mark.parametrize("fault", [faulty.INTO_INPUT, faulty.BEFORE_START, faulty.PAST_END])
def test_a_stray_write_never_spoils_the_next_candidate(faulty_space, fault):
    kernel, space = faulty_space
    bad = next(c for c in space.enumerate() if c.get("upcast") == (fault,))
    with DeviceMeasurer(faulty.NAME, timeout_s=2.0) as measurer:
        for _ in range(2):
            rejected, good = measurer.retime(kernel, [bad, space.default()])
            assert rejected.error == "crash" and good.ok and good.max_error == 0.0


def test_the_tuner_finishes_despite_faults(faulty_space):
    kernel, _ = faulty_space
    with DeviceMeasurer(faulty.NAME, timeout_s=2.0) as measurer:
        [result] = tune_kernels([kernel], faulty.NAME, Budget(trials=20), progress=False,
                                measurer=measurer).results
    assert result.status == "tuned" and result.stopped_by == "exhausted"
    assert result.trials == len(list(faulty_space[1].enumerate()))
    # 6 of 6 faulty configs rejected: segfault, wrong value, past the end, before the start and
    # into an input crash or fail; the hang times out
    assert result.failures == {"crash": 4, "timeout": 1, "wrong": 1}
    assert result.config.get("upcast")[-1] not in EXPECTED
    # the winner, built afresh on the plain CPU device, adds
    device = get_device("cpu")
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(64), rng.standard_normal(64)
    program = device.build(kernel, result.config)
    buffers = [device.alloc(64, dtypes.float32), device.from_numpy(a, dtypes.float32),
               device.from_numpy(b, dtypes.float32)]
    program(buffers)
    np.testing.assert_array_equal(device.copyout(buffers[0]),
                                  a.astype(np.float32) + b.astype(np.float32))


def test_a_real_tuning_run_finds_a_verified_winner(tmp_path):
    kernel = matmul(64, 64, 64)
    with Store(tmp_path / "results.db") as store:
        [result] = tune_kernels([kernel], "cpu", Budget(trials=8), seed=0, store=store,
                                progress=False).results
        device = get_device("cpu")
        stored = store.lookup(kernel.key, device.info().key)
    assert result.status == "tuned" and result.trials == 8 and result.saved
    assert stored is not None and stored.time_s == result.time_s
    # the report's speed-up is the default's time over the winner's, both re-timed together
    assert result.default_time_s > 0
    assert result.speedup == pytest.approx(result.default_time_s / result.time_s)
    assert space_for(kernel, device.info().target).validate(result.config) is None
    # the winner, built afresh, computes a matmul
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((64, 64)), rng.standard_normal((64, 64))
    program = device.build(kernel, result.config)
    buffers = [device.alloc(64 * 64, dtypes.float32), device.from_numpy(a, dtypes.float32),
               device.from_numpy(b, dtypes.float32)]
    program(buffers)
    expected = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(device.copyout(buffers[0]).reshape(64, 64), expected,
                               rtol=1e-4, atol=1e-4)


def test_inputs_are_random_and_never_zero():
    kernel = matmul(8, 8, 8)
    inputs = verify.make_inputs(kernel, seed=1)
    assert len(inputs) == 2 and all(np.all(x != 0) and np.unique(x).size > 32 for x in inputs)
    assert np.array_equal(inputs[0], verify.make_inputs(kernel, seed=1)[0])
    rng = np.random.default_rng(0)
    ints = verify.random_array(dtypes.int32, 1000, rng)
    assert np.all(ints != 0) and np.abs(ints).max() <= 7
    bools = verify.random_array(dtypes.bool, 1000, rng)
    assert 300 < bools.sum() < 700


def test_comparison_catches_wrong_unwritten_and_nan_outputs():
    reference = np.linspace(-1, 1, 100, dtype=np.float32)
    tolerance = verify.tolerance(matmul(8, 1024, 8))
    assert verify.tolerance(matmul(8, 16, 8)) < tolerance < 1e-3
    assert verify.compare(reference + 1e-6, reference, tolerance)[0]
    off = reference.copy()
    off[17] += 0.01
    ok, max_error, message = verify.compare(off, reference, tolerance)
    assert not ok and max_error == pytest.approx(0.01, rel=1e-3) and "element 17" in message
    unwritten = verify.unwritten_fill(reference)
    assert not verify.compare(unwritten, reference, tolerance)[0]
    ints = np.arange(10, dtype=np.int32)
    assert not np.any(verify.unwritten_fill(ints) == ints)
    assert not verify.compare(ints + np.eye(1, 10, 3, dtype=np.int32)[0], ints, 0.0)[0]
    with_nan = np.array([np.nan, 1.0], np.float32)
    assert verify.compare(with_nan.copy(), with_nan, tolerance)[0]
    assert not verify.compare(np.array([0.0, 1.0], np.float32), with_nan, tolerance)[0]


def test_a_piece_of_a_concatenation_is_verified_on_its_slice():
    """A kernel that writes one slice of its output buffer (a matmul with its epilogue, as a
    concatenation's piece): the elements it writes start as a fill unlike the reference, the
    others as the reference, so a candidate that skips one of its own or writes out of its
    slice fails; every config the measurer runs passes."""
    from tunesearch import Tensor
    from tunesearch.graph.schedule import create_schedule
    rng = np.random.default_rng(0)
    a, b, c = (Tensor(rng.standard_normal(s).astype(np.float32)) for s in
               ((20, 30), (30, 24), (20, 8)))
    cat = Tensor.cat([c, (a @ b).relu()], dim=1)
    [kernel] = [item.kernel for item in create_schedule([cat.node]) if item.kernel.n_reduce]
    assert kernel.buffers[0].size == 20 * 32
    writes = verify.written(kernel)
    assert writes.sum() == 20 * 24 and not writes.reshape(20, 32)[:, :8].any()
    inputs = verify.make_inputs(kernel)
    reference = verify.reference_output(kernel, inputs)
    fill = verify.unwritten_fill(reference, writes)
    assert np.isnan(fill[writes]).all() and np.array_equal(fill[~writes], reference[~writes])
    space = space_for(kernel, get_device("cpu").info().target)
    configs = [space.default()] + list(space.enumerate())[:4]
    with DeviceMeasurer("cpu") as measurer:
        results = measurer.measure(kernel, configs)
    assert all(r.ok and r.max_error <= verify.tolerance(kernel) for r in results), results


def test_constant_operands_are_timed_packed_ahead_and_verified():
    """A weight (a constant input) is read as the plan reads it, as a panel packed once: the
    program is built without its packing loop, and its output still matches the reference
    (a program handed the unpacked buffer would compute something else and fail)."""
    kernel = matmul(37, 64, 48)
    device = get_device("cpu")
    space = space_for(kernel, device.info().target)
    configs = [c for c in space.enumerate() if 2 in c.get("pack", ())][:3]
    assert configs, "no config packs the weight"
    with DeviceMeasurer("cpu") as measurer:
        plain = measurer.measure(kernel, configs)
        assert all(not measurer._built[(kernel.key, c)].layouts for c in configs)
        measurer.use_constants({kernel.key: frozenset({2})})
        packed = measurer.measure(kernel, configs)
        for config, result in zip(configs, packed):
            built = measurer._built[(kernel.key, config)]
            assert set(built.layouts) == {2} and "pk2 = data2;" in built.source.text
            assert result.ok and result.max_error <= verify.tolerance(kernel), result
        assert all(r.ok for r in plain)
        # a config that packs only the other operand reads nothing ahead
        other = next((c for c in space.enumerate() if c.get("pack") == (1,)), None)
        if other is not None:
            [result] = measurer.measure(kernel, [other])
            assert result.ok and not measurer._built[(kernel.key, other)].layouts


def test_a_models_weights_are_timed_from_memory_and_verified():
    """Every weight of a model is pushed out of the caches before each timed run (its kernel
    reads it from memory in the model: every other kernel ran since), a small one as well as
    one past half of L2; candidates timed so, the large weight's k tile walked by each thread
    among them, still match the reference."""
    device = get_device("cpu")
    target = device.info().target
    assert from_memory(frozenset({2})) == (2,)
    assert from_memory(frozenset({3, 1})) == (1, 3)
    assert from_memory(frozenset()) == ()
    depth = 1024
    cols = max(64, -(-target.l2.size // (2 * depth * 4)) + 16)  # just past half of L2
    kernel = matmul(49, depth, cols)
    space = space_for(kernel, target, frozenset({2}))
    default = space.default()
    configs = [default] + [c for c in space.neighbours(default) if c.get("ktile")][:2]
    small = matmul(37, 64, 48)
    with DeviceMeasurer("cpu") as measurer:
        measurer.use_constants({kernel.key: frozenset({2}), small.key: frozenset({2})})
        results = measurer.measure(kernel, configs)
        results += measurer.measure(small, [space_for(small, target, frozenset({2})).default()])
    assert all(r.ok for r in results), results
    kernels = [kernel] * len(configs) + [small]
    assert all(r.max_error <= verify.tolerance(k) for r, k in zip(results, kernels))


def test_the_cpu_pushes_a_buffer_out_of_its_caches_and_keeps_its_values():
    device = get_device("cpu")
    buffer = device.alloc(100_000, dtypes.float32)
    values = np.arange(100_000, dtype=np.float32)
    device.copyin(buffer, values)
    assert device.evict([buffer]) == (platform.machine().lower() in ("x86_64", "amd64",
                                                                     "aarch64", "arm64"))
    np.testing.assert_array_equal(device.copyout(buffer), values)
