"""The end of `tune`: a winner that runs slower inside its model than the default did there
gives way to the default in a real SQLite database; noisy blocks are reported as noisy."""
from __future__ import annotations

import json

from tests.search.kernels import add, matmul
from tunesearch.search import in_model as before_after
from tunesearch.search.in_model import Comparison
from tunesearch.db import DeviceRecord, KernelRecord, ResultRecord, Store
from tunesearch.runtime.device import get_device
from tunesearch.search.results import KernelResult
from tunesearch.search.tune import keep_defaults
from tunesearch.space.config import SPACE_VERSION
from tunesearch.space.spaces import space_for


def _store_winner(store, device, kernel, config, time_s, default_s):
    info = device.info()
    store.record(KernelRecord(kernel.key, kernel.name, kernel.canonical(), kernel.ops_summary(),
                              "x".join(map(str, kernel.domain)), SPACE_VERSION),
                 DeviceRecord(info.key, info.backend, info.name, info.as_dict()),
                 ResultRecord(json.loads(config.to_json()), time_s, 0.0, 1.0, 1.0, default_s,
                              default_s / time_s, 10, "tpe"))
    return KernelResult(kernel.key, kernel.name, "tuned", 1, config, time_s,
                        default_time_s=default_s, speedup=default_s / time_s, trials=10,
                        sampler="tpe")


def test_a_winner_that_loses_in_the_model_gives_way_to_the_default(tmp_path):
    device = get_device("cpu")
    space_of = {}
    loser_kernel, winner_kernel = matmul(32, 48, 40), add(64, 64)
    results = []
    with Store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        for kernel in (loser_kernel, winner_kernel):
            space = space_of[kernel.key] = space_for(kernel, device.info().target)
            other = space.naive()
            assert other != space.default()
            results.append(_store_winner(store, device, kernel, other, 1e-4, 2e-4))
        # inside the model: the matmul's winner ran 30% slower than its default, the add's
        # winner 2% slower (noise), on blocks that agreed within 3%
        comparison = Comparison(1e-3, 1e-3, 0.03, 3, kernel_before={
            loser_kernel.key: 1e-4, winner_kernel.key: 1e-4}, kernel_after={
            loser_kernel.key: 1.3e-4, winner_kernel.key: 1.02e-4})
        lost = before_after.losers(comparison, results)
        assert [r.kernel_key for r in lost] == [loser_kernel.key]
        kept = keep_defaults(store, device, {loser_kernel.key: loser_kernel}, lost)
        assert kept == [loser_kernel.key]
        key = device.info().key
        stored = store.lookup(loser_kernel.key, key)
        assert stored.config == json.loads(space_of[loser_kernel.key].default().to_json())
        assert stored.time_s == 2e-4 and "default kept" in stored.sampler
        untouched = store.lookup(winner_kernel.key, key)
        assert untouched.config == json.loads(space_of[winner_kernel.key].naive().to_json())


def test_noise_between_blocks_widens_the_margin_and_is_reported():
    comparison = Comparison(1e-3, 0.9e-3, 0.4, 7, kernel_before={"k": 1e-4},
                            kernel_after={"k": 1.3e-4})
    assert comparison.noisy
    result = KernelResult("k", "k", "tuned", 1, space_for(add(8, 8), get_device(
        "cpu").info().target).naive(), 1e-4, default_time_s=2e-4)
    # 30% slower, but the blocks themselves differed by 40%: not evidence enough
    assert before_after.losers(comparison, [result]) == []
    quiet = Comparison(1e-3, 0.9e-3, 0.02, 3, kernel_before={"k": 1e-4},
                       kernel_after={"k": 1.3e-4})
    assert not quiet.noisy and before_after.losers(quiet, [result]) == [result]


def test_only_this_runs_winners_are_judged_and_on_their_fastest_block():
    config = space_for(add(8, 8), get_device("cpu").info().target).naive()
    tuned = KernelResult("k", "k", "tuned", 1, config, 1e-4, default_time_s=2e-4)
    stored = KernelResult("k", "k", "stored", 1, config, 1e-4, default_time_s=2e-4)
    slow_median_fast_block = Comparison(1e-3, 1e-3, 0.02, 3, kernel_before={"k": 1e-4},
                                        kernel_after={"k": 1.3e-4},
                                        kernel_after_best={"k": 1.01e-4})
    assert before_after.losers(slow_median_fast_block, [tuned]) == []
    slow_everywhere = Comparison(1e-3, 1e-3, 0.02, 3, kernel_before={"k": 1e-4},
                                 kernel_after={"k": 1.3e-4}, kernel_after_best={"k": 1.2e-4})
    assert before_after.losers(slow_everywhere, [tuned, stored]) == [tuned]
