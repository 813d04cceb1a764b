"""`tunesearch report` on a real SQLite database filled with known kernels, trials (each with the
time it was measured) and a registered model: the model's latency curve, the kernels' shares, and
the plot's log axes and order."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from tunesearch.db import DeviceRecord, KernelRecord, ResultRecord, Store, TrialRecord
from tunesearch.db.leases import WorkItem, register_model
from tunesearch.cli.report import kernel_shares, model_curves

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
DEVICE = DeviceRecord("cpu-test", "cpu", "Test CPU", {"threads": 2})
MS = 1e-3


def kernel(name: str) -> KernelRecord:
    return KernelRecord(f"k_{name}", name, f"canonical {name}", "mul", "8x8", 1)


def result(time_s: float, default_s: float, at_s: float) -> ResultRecord:
    return ResultRecord(config={"unroll": 1}, time_s=time_s, spread=0.0, gflops=1.0, gbps=1.0,
                        default_time_s=default_s, speedup=default_s / time_s, trials=3,
                        sampler="tpe", created=T0 + timedelta(seconds=at_s))


def trial(number: int, ms: float | None, at_s: float) -> TrialRecord:
    return TrialRecord(number, {"unroll": number}, None if ms is None else ms * MS,
                       None if ms is not None else "compile error: x",
                       T0 + timedelta(seconds=at_s))


@pytest.fixture
def db(tmp_path):
    """Model "net" runs A twice, B once and C (never measured) once; A was searched first,
    B later (the winners stored at 22 s and 41 s). "other" is a kernel with a result that no
    registered model runs."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Store(url) as store:
        # A: default 10 ms; trial 0 (the default) 12 ms, then 6 ms, a failure, then 8 ms
        store.record(kernel("A"), DEVICE, result(6.5 * MS, 10 * MS, 22),
                     [trial(0, 12, 0), trial(1, 6, 5), trial(2, None, 7), trial(3, 8, 20)])
        # B: default 4 ms; 3 ms then 1 ms; the finalists re-timed the winner at 1.5 ms
        store.record(kernel("B"), DEVICE, result(1.5 * MS, 4 * MS, 41),
                     [trial(0, 3, 10), trial(1, 1, 30)])
        store.record(kernel("other"), DEVICE, result(1 * MS, 100 * MS, 99), [])
        register_model(store, "net", DEVICE.key, [WorkItem("k_A", "A", 2), WorkItem("k_B", "B"),
                                                  WorkItem("k_C", "C")])
        register_model(store, "untuned", DEVICE.key, [WorkItem("k_D", "D")])
    return url


def test_model_latency_curve_from_the_trial_history(db):
    with Store(db) as store:
        rows = store.list_results()
        curves = model_curves(store, rows)
    assert [c.model for c in curves] == ["net"]  # "untuned" has no result: no curve
    net = curves[0]
    assert (net.kernels, net.missing) == (3, 1)
    assert net.default_s == pytest.approx((2 * 10 + 4) * MS)
    assert net.tuned_s == pytest.approx((2 * 6.5 + 1.5) * MS)  # the stored winners
    assert net.speedup == pytest.approx(24 / 14.5)
    # 2 A + B with the best measured by then: the default (12 ms) and 8 ms are no gain; the
    # curve ends when B's winner was stored
    want = [(0, 24), (0, 24), (5, 16), (10, 15), (20, 15), (30, 13), (41, 13)]
    assert [(t, round(v / MS, 9)) for t, v in net.points] == want


def test_shares_of_model_time(db):
    with Store(db) as store:
        shares = kernel_shares(store, store.list_results())
    # A runs twice; "other" is in no model and counts once
    total = 2 * 10 + 4 + 100
    assert shares["k_A", DEVICE.key] == pytest.approx(20 / total)
    assert shares["k_B", DEVICE.key] == pytest.approx(4 / total)
    assert shares["k_other", DEVICE.key] == pytest.approx(100 / total)


def test_report_json_and_plot(db, tmp_path):
    png = tmp_path / "report.png"
    proc = subprocess.run([sys.executable, "-m", "tunesearch", "report", "--db", db, "--json",
                           "--plot", str(png)], capture_output=True, text=True, check=True)
    summary = json.loads(proc.stdout)
    device = summary[f"Test CPU ({DEVICE.key})"]
    assert [r["kernel"] for r in device["results"]] == ["other", "A", "B"]  # by share
    (net,) = device["models"]
    assert net["model"] == "net" and net["tuning_s"] == 41
    assert net["tuned_s"] == pytest.approx(14.5 * MS)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {png}" in proc.stderr


def test_plot_axes(db, tmp_path):
    pytest.importorskip("matplotlib")
    from tunesearch.cli.report_plot import plot_report
    with Store(db) as store:
        rows = store.list_results()
        curves = model_curves(store, rows)
        fig = plot_report(store, rows, kernel_shares(store, rows), curves,
                          str(tmp_path / "r.png"))
    models, bars, convergence = fig.axes
    assert "tuning time" in models.get_xlabel()
    assert bars.get_xscale() == "log" and convergence.get_yscale() == "log"
    labels = [t.get_text().split()[0] for t in bars.get_yticklabels()]
    assert labels == ["other", "A", "B"]
    # every bar starts at 1x and ends at its kernel's speed-up
    ends = sorted(round(p.get_x() + p.get_width(), 6) for p in bars.patches)
    assert ends == sorted([100.0, round(10 / 6.5, 6), round(4 / 1.5, 6)])
    assert all(p.get_x() == 1.0 for p in bars.patches)
