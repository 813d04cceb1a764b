"""One measurement at a time per physical device: processes that time candidates on the same
device take turns (their timed runs never overlap) while the rest of their work goes on."""
from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import time
from pathlib import Path

from tests.search.kernels import matmul
from tunesearch.runtime.device import get_device
from tunesearch.search import DeviceMeasurer
from tunesearch.search.device_lock import DeviceLock, measuring_lock, physical_device
from tunesearch.search.messages import DeviceSpec, Timing
from tunesearch.search.runner import ProcessRunner
from tunesearch.space.spaces import space_for

SPAWN = multiprocessing.get_context("spawn")


class _RecordingRunner(ProcessRunner):
    """A real runner that notes when each timed run started and ended (wall clock)."""

    def __init__(self, spec: DeviceSpec):
        super().__init__(spec)
        self.spans: list[tuple[float, float]] = []

    def run(self, request):
        start = time.time()
        result = super().run(request)
        self.spans.append((start, time.time()))
        assert result.ok, result.message
        return result


def _measure_in_turn(folder: str, out: str, barrier) -> None:
    """One process: retime a matmul's default config twice, recording its runs' spans."""
    kernel = matmul(48, 64, 56)
    space = space_for(kernel, get_device("cpu").info().target)
    configs = [space.default()]
    runner = _RecordingRunner(DeviceSpec.of("cpu"))
    measurer = DeviceMeasurer("cpu", compile_workers=1, runner=runner,
                              lock=DeviceLock("host", folder=Path(folder)),
                              final_timing=Timing(warmup=1, min_time_s=0.03, min_repeats=3))
    with measurer:
        measurer.measure(kernel, configs)  # compiled, and the runner process started
        barrier.wait(timeout=120)
        for _ in range(2):
            measurer.retime(kernel, configs)
    with open(out, "w") as file:
        json.dump(runner.spans, file)


def _overlaps(a: list, b: list) -> list:
    return [(x, y) for x in a for y in b if x[0] < y[1] and y[0] < x[1]]


def _spans_of_two_processes(folder: Path) -> tuple[list, list]:
    """The timed runs after the barrier of two processes measuring on one device."""
    folder.mkdir()
    barrier = SPAWN.Barrier(2)
    outs = [folder / f"spans{i}.json" for i in range(2)]
    processes = [SPAWN.Process(target=_measure_in_turn, args=(str(folder), str(out), barrier))
                 for out in outs]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)
        assert process.exitcode == 0
    first, second = (json.loads(out.read_text())[1:] for out in outs)  # the runs after the wait
    assert len(first) == len(second) == 6  # 2 retimes in 3 rounds
    return first, second


def test_two_processes_never_time_on_one_device_at_once(tmp_path):
    # the check means something only where both were timing over the same stretch of time
    # (they contended for the device); on a loaded machine one process may finish before the
    # other starts, so the pair runs again, up to three times, until they overlap
    for attempt in range(3):
        first, second = _spans_of_two_processes(tmp_path / str(attempt))
        if first[0][0] < second[-1][1] and second[0][0] < first[-1][1]:
            break
    else:
        raise AssertionError("the two processes never timed over the same stretch of time")
    assert _overlaps(first, second) == []


def _hold(folder: str, identity: str, out: str, barrier) -> None:
    lock = DeviceLock(identity, folder=Path(folder))
    barrier.wait(timeout=60)
    spans = []
    for _ in range(5):
        with lock:
            start = time.time()
            time.sleep(0.05)
            spans.append((start, time.time()))
    with open(out, "w") as file:
        json.dump(spans, file)


def _spans_of_two(tmp_path, identities: tuple[str, str]) -> tuple[list, list]:
    barrier = SPAWN.Barrier(2)
    outs = [tmp_path / f"hold{i}.json" for i in range(2)]
    processes = [SPAWN.Process(target=_hold, args=(str(tmp_path), identity, str(out), barrier))
                 for identity, out in zip(identities, outs)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    first, second = (json.loads(out.read_text()) for out in outs)
    return first, second


def test_one_device_is_held_by_one_process_at_a_time(tmp_path):
    first, second = _spans_of_two(tmp_path, ("host", "host"))
    assert _overlaps(first, second) == []


def _try_lock(path) -> bool:
    """Whether this process could take the lock file at path now (without waiting)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_held_device_blocks_only_itself_and_is_released_when_its_holder_dies(tmp_path):
    holder = SPAWN.Process(target=_hold_forever, args=(str(tmp_path),))
    holder.start()
    deadline = time.time() + 60
    while not (tmp_path / "held").exists() and time.time() < deadline:
        time.sleep(0.05)
    host, gpu = DeviceLock("host", folder=tmp_path), DeviceLock("cuda-0", folder=tmp_path)
    assert not _try_lock(host.path)
    assert _try_lock(gpu.path)  # another physical device is free meanwhile
    holder.kill()
    holder.join()
    assert _try_lock(host.path)  # the kernel dropped the dead process's flock
    with host:
        pass


def _hold_forever(folder: str) -> None:
    lock = DeviceLock("host", folder=Path(folder))
    with lock:
        open(os.path.join(folder, "held"), "w").close()
        time.sleep(600)


def test_the_cpu_and_a_cuda_device_are_told_apart(monkeypatch):
    assert physical_device(DeviceSpec.of("cpu")) == "host"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234,GPU-5678")
    assert physical_device(DeviceSpec("cuda")) == "cuda-GPU-1234"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert physical_device(DeviceSpec("cuda")) == "cuda-0"
    assert measuring_lock(DeviceSpec.of("cpu")).path.name == "measure-host.lock"
