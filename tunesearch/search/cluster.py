"""Tuning on a Ray cluster: the driver builds the kernels once, nodes that hold the device search
them, the driver alone writes the database.

    report = run_cluster(kernels, "cpu", Budget(trials=40), Store(url), "auto", model="resnet50")

Each node declares how many physical devices of a kind it lends to tuning as a Ray custom
resource named after the kind, `tunesearch-cpu` or `tunesearch-cuda` (see `resource_name`):

    ray start --head --resources '{"tunesearch-cpu": 1}'
    ray start --address HEAD:6379 --resources '{"tunesearch-cuda": 1}'

One measuring actor is started per unit of the resource, so one per physical device: it opens
the device on its node, compiles there in parallel and times one candidate at a time (the device
lock of search/device_lock.py also holds against other tunes on that node). The driver sends
each actor one kernel at a time, heaviest first, and stores every winner under the device key of
the node that measured it; nodes with the same device key share the kernels, nodes with another
key each tune every kernel for their own key. What travels: kernels and configs (data, never
code) to the nodes, results back; the database stays with the driver, so a SQLite file works.
The driver also looks up where each search starts (search/starts.py: the kernel's winners on the
nearest other devices, other shapes' winners) for the node's device key just before it sends
the kernel, so a node searches as `tune` on its own machine would, kernels it stored a moment
ago included.

A node that dies mid-search gives its kernel back: it goes to another actor of the same key, or
comes back unfinished when none is left. Ctrl-C keeps every result already stored.
"""
from __future__ import annotations

import socket
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from tunesearch.db import DatabaseError, DeviceRecord, ResultRecord, Store
from tunesearch.db.leases import DONE, FAILED, WAITING, Claim, LeaseBoard
from tunesearch.errors import ctrl_c_pressed
from tunesearch.graph.kernel import Kernel
from tunesearch.search.messages import DeviceSpec
from tunesearch.search.planning import MeasurerFactory, default_measurer, plan_work
from tunesearch.search.progress import describe
from tunesearch.search.results import Budget, KernelResult, TuneError, TuneReport
from tunesearch.search.samplers import DEFAULT_SAMPLER
from tunesearch.search.starts import Starts, find_starts
from tunesearch.search.tune import kernel_record
from tunesearch.space.spaces import space_for
from tunesearch.space.target import Target

INSTALL_HINT = "--cluster needs Ray: pip install 'tunesearch[ray]'"
ATTEMPTS = 2          # actors a kernel is sent to before it comes back unfinished
START_TIMEOUT_S = 300.0  # how long the actors may take to open their devices


def resource_name(device: str) -> str:
    """The Ray custom resource a node declares per physical device of this kind."""
    return f"tunesearch-{device.split(':')[0].lower()}"


def import_ray():
    """The ray module, or a TuneError saying how to install it (one line)."""
    try:
        import ray
    except ImportError:
        raise TuneError(INSTALL_HINT) from None
    return ray


def check_cluster(address: str | None, n_workers: int) -> None:
    """Refuse, before any work, what cannot run: no Ray, or --cluster with --workers."""
    if address is None:
        return
    if not address.strip():
        raise TuneError("--cluster takes a Ray address (HOST:PORT, or auto)")
    if n_workers > 1:
        raise TuneError("--cluster and --workers exclude each other: the cluster's actors are "
                        "the workers")
    import_ray()
    problem = _reachable(address)
    if problem:
        raise TuneError(f"cannot join the Ray cluster at {address}: {problem}")


class DeviceActor:
    """One physical device of a node, tuning the kernels the driver sends it (a Ray actor)."""

    def __init__(self, device: DeviceSpec, seed: int, measurer: MeasurerFactory):
        self.device = device.open()
        self.measurer = measurer(self.device, seed, 1)

    def describe(self) -> tuple[str, str, str, dict, Target, str]:
        info = self.device.info()
        return info.key, info.backend, info.name, info.as_dict(), info.target, \
            socket.gethostname()

    def tune(self, kernel: Kernel, budget: Budget, sampler: str, seed: int,
             constants: frozenset[int], starts: Starts = Starts()) -> KernelResult:
        from tunesearch.search.tune import tune_kernels
        report = tune_kernels([kernel], self.device, budget, sampler, seed, store=None,
                              progress=False, retune=True, measurer=self.measurer,
                              constants={kernel.key: constants} if constants else None,
                              starts={kernel.key: starts})
        return report.results[0]


@dataclass
class _Actor:
    handle: object
    key: str
    record: DeviceRecord
    target: Target  # its spaces, for the starts the driver looks up
    host: str
    name: str = ""  # how the leases name it: host:ray:N
    alive: bool = True


@dataclass
class _Pending:
    kernel: Kernel
    occurrences: int
    trials: int | None
    tries: int = 0


class _Leases:
    """The leases `tunesearch status` shows: the driver claims one for each kernel it sends to
    an actor, renews it while the search runs and finishes it with the outcome. They are a
    display: a database that refuses a write here stops nothing."""

    def __init__(self, store: Store):
        self.board = LeaseBoard(store)
        self.renewed = time.monotonic()

    def _quietly(self, action):
        try:
            return action()
        except DatabaseError:
            return None

    def register(self, model: str, key: str, items: list, retune: bool) -> None:
        self._quietly(lambda: self.board.register(model, key, items, retune=retune))

    def claim(self, actor: _Actor, kernel: Kernel) -> Claim | None:
        return self._quietly(lambda: self.board.claim(actor.name, actor.key, [kernel.key]))

    def renew(self, claims: list[Claim]) -> None:
        if time.monotonic() - self.renewed < self.board.ttl.total_seconds() / 3:
            return
        self.renewed = time.monotonic()
        for claim in claims:
            self._quietly(lambda: self.board.renew(claim, 0))

    def finish(self, claim: Claim | None, state: str, trials: int = 0, message: str = ""):
        if claim is not None:
            self._quietly(lambda: self.board.finish(claim, state, trials=trials,
                                                    message=message))


@dataclass
class _Run:
    """What the driver tracks while the actors work."""
    leases: _Leases
    queues: dict[str, deque] = field(default_factory=dict)
    in_flight: dict = field(default_factory=dict)  # object ref -> (actor, pending, claim)
    results: dict[tuple[str, str], KernelResult] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _reachable(address: str) -> str | None:
    """Why HOST:PORT cannot be reached, or None; Ray itself waits a minute before it says."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return None  # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as err:
        return err.strerror or str(err)
    return None


def _connect(ray, address: str) -> None:
    if ray.is_initialized():
        return
    problem = _reachable(address)
    if problem:
        raise TuneError(f"cannot join the Ray cluster at {address}: {problem}")
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR",
                 configure_logging=False)
    except Exception as err:  # noqa: BLE001  (Ray raises many kinds for an unreachable head)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise TuneError(f"cannot join the Ray cluster at {address}: {first}") from None


def _start_actors(ray, device: str, seed: int, measurer: MeasurerFactory) -> list[_Actor]:
    name = resource_name(device)
    units = int(ray.cluster_resources().get(name, 0))
    if units < 1:
        raise TuneError(f"no node of the Ray cluster declares the resource {name}: start "
                        f"nodes with ray start --resources '{{\"{name}\": 1}}'")
    remote = ray.remote(num_cpus=0, resources={name: 1}, max_restarts=0)(DeviceActor)
    spec = DeviceSpec.of(device)
    handles = [remote.remote(spec, seed, measurer) for _ in range(units)]
    actors = []
    for handle in handles:
        try:
            key, backend, dev_name, fingerprint, target, host = ray.get(
                handle.describe.remote(), timeout=START_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001  (a node without the device, a dead node)
            ray.kill(handle)
            first = str(err).strip().splitlines()[-1] if str(err).strip() else ""
            raise TuneError(f"an actor could not open {device!r} on its node: {first}"
                            ) from None
        actors.append(_Actor(handle, key, DeviceRecord(key, backend, dev_name, fingerprint),
                             target, host, f"{host}:ray:{len(actors)}"))
    return actors


def _save(store: Store, kernel: Kernel, actor: _Actor, result: KernelResult) -> KernelResult:
    if result.time_s is None or result.config is None:
        return result
    import json
    record = ResultRecord(
        config=json.loads(result.config.to_json()), time_s=result.time_s,
        spread=result.spread or 0.0, gflops=result.gflops or 0.0, gbps=result.gbps or 0.0,
        default_time_s=result.default_time_s or 0.0, speedup=result.speedup or 0.0,
        trials=result.trials, sampler=result.sampler, host=actor.host)
    saved = store.record(kernel_record(kernel), actor.record, record)
    return replace(result, saved=bool(saved))


def _dispatch(ray, run: _Run, actors: list[_Actor], store: Store, retune: bool, budget: Budget,
              sampler: str, seed: int, constants: Mapping[str, frozenset[int]]) -> None:
    """Give each idle live actor the next kernel of its device key's queue."""
    busy = {id(actor) for actor, _, _ in run.in_flight.values()}
    for actor in actors:
        if not actor.alive or id(actor) in busy:
            continue
        queue = run.queues.get(actor.key)
        while queue:
            job = queue.popleft()
            found = None if retune else store.lookup(job.kernel.key, actor.key)
            if found is not None and found.verified:
                run.results[(actor.key, job.kernel.key)] = KernelResult(
                    job.kernel.key, job.kernel.name, "stored", job.occurrences,
                    message="already in the database (--retune tunes it again)")
                continue
            job.tries += 1
            held = frozenset(constants.get(job.kernel.key, ()))
            starts = find_starts(store, kernel_record(job.kernel),
                                 space_for(job.kernel, actor.target, held), actor.record)
            ref = actor.handle.tune.remote(job.kernel, replace(budget, trials=job.trials),
                                           sampler, seed, held, starts)
            run.in_flight[ref] = (actor, job, run.leases.claim(actor, job.kernel))
            break


def _collect(ray, run: _Run, ref, store: Store, show) -> None:
    """Store one finished search, or give its kernel back when its actor died."""
    actor, job, claim = run.in_flight.pop(ref)
    try:
        result = ray.get(ref)
    except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as err:
        actor.alive = False
        run.notes.append(f"the actor on {actor.host} stopped ({type(err).__name__}); its "
                         f"kernel {job.kernel.name} went back to the queue")
        run.leases.finish(claim, WAITING, message=f"its actor on {actor.host} stopped")
        if job.tries < ATTEMPTS:
            run.queues[actor.key].appendleft(job)
        return
    except ray.exceptions.RayTaskError as err:
        first = str(err).strip().splitlines()[-1]
        result = KernelResult(job.kernel.key, job.kernel.name, "failed", job.occurrences,
                              message=first[:300])
    result = replace(result, occurrences=job.occurrences)
    try:
        result = _save(store, job.kernel, actor, result)
    except Exception as err:  # noqa: BLE001  (a refused write is reported, not raised)
        result = replace(result, save_error=str(err), message=f"not saved: {err}")
    run.results[(actor.key, job.kernel.key)] = result
    state = DONE if result.time_s is not None and not result.save_error else \
        FAILED if result.status == "failed" else WAITING
    run.leases.finish(claim, state, result.trials, result.message)
    show(f"[{len(run.results)} done, {len(run.in_flight)} running, {actor.host}] "
         f"{describe(result)}")


def run_cluster(kernels: Iterable, device: str, budget: Budget, store: Store, address: str, *,
                sampler: str = DEFAULT_SAMPLER, seed: int = 0, model: str = "",
                retune: bool = False, weights: Mapping[str, float] | None = None,
                progress: bool = True, measurer: MeasurerFactory | None = None,
                constants: Mapping[str, frozenset[int]] | None = None) -> TuneReport:
    """Tune every unique kernel on the Ray cluster at `address` (see the module docstring);
    returns the TuneReport for the device key of the first actor (the driver's own, where it is
    a node). measurer(device, seed, 1) makes each actor's measurer (default: real measurements;
    it travels to the nodes pickled, so a module-level function). Raises TuneError, one line,
    where Ray, the cluster or the resource is missing."""
    ray = import_ray()
    start = time.monotonic()
    _connect(ray, address)
    actors = _start_actors(ray, device, seed, measurer or default_measurer)
    planned = plan_work(kernels, budget, 1, weights)
    console = None
    if progress:
        from rich.console import Console
        console = Console(stderr=True, highlight=False)

    def show(line: str) -> None:
        if console is not None:
            console.print(line, markup=False)
    run = _Run(_Leases(store))
    for key in dict.fromkeys(actor.key for actor in actors):
        store.touch_device(next(a.record for a in actors if a.key == key))
        run.leases.register(model, key, [item for _, item in planned], retune)
        run.queues[key] = deque(_Pending(k, item.occurrences, item.budget or budget.trials)
                                for k, item in sorted(planned, key=lambda p: -p[1].weight))
    interrupted = False
    try:
        while True:
            if ctrl_c_pressed():
                raise KeyboardInterrupt
            _dispatch(ray, run, actors, store, retune, budget, sampler, seed, constants or {})
            if not run.in_flight:
                break
            ready, _ = ray.wait(list(run.in_flight), num_returns=1, timeout=1.0)
            for ref in ready:
                _collect(ray, run, ref, store, show)
            run.leases.renew([claim for _, _, claim in run.in_flight.values() if claim])
    except KeyboardInterrupt:
        interrupted = True
        for _, _, claim in run.in_flight.values():  # the next run continues them
            run.leases.finish(claim, WAITING, message="interrupted")
    finally:
        for actor in actors:
            ray.kill(actor.handle)
    main = actors[0]
    results = []
    for kernel, item in planned:
        results.append(run.results.get((main.key, kernel.key)) or KernelResult(
            kernel.key, kernel.name, "skipped", item.occurrences,
            message="not finished: the run was interrupted or every actor of this device "
                    "stopped"))
    for note in run.notes:
        show(note)
    return TuneReport(main.key, main.record.name, tuple(results), interrupted,
                      time.monotonic() - start, tuple(run.notes))
