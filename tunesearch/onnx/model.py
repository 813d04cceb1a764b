"""A loaded ONNX model: `load` reads it, `OnnxModel` traces it into Tensor calls once per set of
input shapes and replays the plan of kernels on each call (see the package's docstring)."""
from __future__ import annotations

import math
import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np
import onnx
from onnx import numpy_helper

from tunesearch import settings
from tunesearch.errors import InputError
from tunesearch.graph.kernel import Kernel
from tunesearch.graph.schedule import ScheduleItem
import tunesearch.onnx.elementwise  # noqa: F401  (each operator module registers its operators)
import tunesearch.onnx.index  # noqa: F401
import tunesearch.onnx.nn  # noqa: F401
import tunesearch.onnx.reduce  # noqa: F401
import tunesearch.onnx.shape  # noqa: F401
from tunesearch.onnx import regions, rewrite
from tunesearch.onnx.declared import check_declared
from tunesearch.onnx.files import read_model
from tunesearch.lowering.plan import Plan
from tunesearch.onnx.memory import check_fits
from tunesearch.onnx.registry import OPS, NodeContext, OnnxImportError, internal_dtype, producible
from tunesearch.onnx.signature import (ONNX_DOMAINS, ValueInfo, bind_inputs,
                                       check_operators, check_types, declared_dims,
                                       declared_shape, element_dtype)
from tunesearch.runtime.device import get_device
from tunesearch.runtime.lookup import TunedConfigs
from tunesearch.tensor import Tensor, default_lookup

_DRAW_PIECE = 1 << 20  # random input values drawn at a time (even: see random_inputs)


@dataclass(frozen=True)
class GraphInfo:
    name: str
    ir_version: int
    opset: int
    producer: str
    n_nodes: int
    n_initializers: int
    n_parameters: int
    op_counts: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Profile:
    """One model run, timed: `latency` is the median of whole calls (copies in and out included),
    `kernel_seconds` the sum of the kernels' median times."""
    latency: float
    kernel_seconds: float
    kernels: tuple[tuple[Kernel, float], ...]
    n_tuned: int  # kernels that ran with a tuned config from the database

    @property
    def launch_overhead(self) -> float:
        """What a call costs beyond its kernels, per launch (building the arguments, the calls,
        the copies): a device may time a kernel over many back-to-back launches (CUDA does), so
        the time around one timing says nothing about one launch."""
        return max(0.0, self.latency - self.kernel_seconds) / max(1, len(self.kernels))


def supported_operators() -> list[str]:
    """The ONNX operators the importer implements (some refuse a few settings at load)."""
    return sorted(OPS)


def load(path_or_bytes: Union[str, os.PathLike, bytes, onnx.ModelProto],
         input_shapes: Optional[dict[str, tuple]] = None, device: Optional[str] = None,
         lookup: Optional[TunedConfigs] = None) -> "OnnxModel":
    """Load an ONNX model from a path, bytes or a ModelProto, ready to call on numpy inputs.

    input_shapes binds dynamic dimensions, e.g. {"input": (1, 3, 224, 224)}; device is a device
    name (default: TUNESEARCH_DEVICE, else "cpu"); lookup gives the tuned configs its kernels
    run with (default: the process's, `tunesearch.tensor.default_lookup()`)."""
    model = OnnxModel(read_model(path_or_bytes), input_shapes, device, lookup)
    if isinstance(path_or_bytes, (str, os.PathLike)):  # a fresh process can load it again
        model.recipe = {"function": "tunesearch.onnx:load",
                        "arguments": {"path_or_bytes": os.path.abspath(path_or_bytes),
                                      "input_shapes": {v.name: list(v.shape)
                                                       for v in model.inputs},
                                      "device": model.device}}
    return model


class OnnxModel:
    """A loaded model: call it with numpy arrays, get {output name: array}. Its kernels run with
    the configs `lookup` chooses (`use_lookup` changes it)."""

    def __init__(self, proto: onnx.ModelProto, input_shapes: Optional[dict[str, tuple]] = None,
                 device: Optional[str] = None, lookup: Optional[TunedConfigs] = None):
        check_declared(proto)  # before any work: what the model declares is what it holds
        self.proto = proto
        self.recipe: Optional[dict] = None  # how a fresh process loads it again (see load)
        self.device = device or settings.default_device()
        self.lookup = default_lookup() if lookup is None else lookup
        graph = proto.graph
        self.opset = next((o.version for o in proto.opset_import if o.domain in ONNX_DOMAINS), 1)
        check_operators(graph, self.opset, self.device)
        self.initializers = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        declared = [v for v in graph.input if v.name not in self.initializers]
        check_types(declared, "input", internal_dtype)
        check_types(graph.output, "output", producible)
        self.inputs, symbols = bind_inputs(declared, dict(input_shapes or {}))
        # what a call may feed: the declared dims, None where a dim is dynamic
        self._accepts = {v.name: tuple(d if isinstance(d, int) else None
                                       for d in (declared_dims(v) or [None] * len(i.shape)))
                         for v, i in zip(declared, self.inputs)}
        self.outputs = [ValueInfo(v.name, declared_shape(v, symbols), element_dtype(v))
                        for v in graph.output]
        counts = Counter(n.op_type for n in graph.node)
        self.graph = GraphInfo(graph.name, proto.ir_version, self.opset, proto.producer_name,
                               len(graph.node), len(graph.initializer),
                               int(sum(a.size for a in self.initializers.values())),
                               tuple(sorted(counts.items())))
        if settings.graph_rewrites():
            rewritten = rewrite.fold_into_weights(graph, self.initializers)
        else:
            rewritten = rewrite.Rewritten(list(graph.node), dict(self.initializers))
        self._nodes, self._constants = rewritten.nodes, rewritten.constants
        self.rewrites = dict(rewritten.folded)  # {"BatchNormalization into Conv": count, ..}
        self._fanout = Counter(name for n in self._nodes for name in n.input if name)
        self._fanout.update(v.name for v in graph.output)
        self._lazy_fanout = regions.fused_fanouts(self._nodes, {v.name for v in graph.output})
        self._plans: dict[tuple, Plan] = {}
        self._plan({v.name: v.shape for v in self.inputs})  # trace now: import errors show here

    def __repr__(self) -> str:
        ins = ", ".join(f"{v.name}{list(v.shape)}" for v in self.inputs)
        return f"<OnnxModel {self.graph.name or '?'} ({ins}) {self.graph.n_nodes} nodes on " \
               f"{self.device}>"

    # ---- calling
    def __call__(self, *args, **kwargs) -> dict[str, np.ndarray]:
        """model(x), model(x, y), model({"x": x}) or model(x=x): {output name: array}."""
        if len(args) == 1 and isinstance(args[0], dict) and not kwargs:
            return self.run(args[0])
        if len(args) > len(self.inputs):
            raise TypeError(f"the model takes {len(self.inputs)} inputs, got {len(args)}")
        feeds = {v.name: a for v, a in zip(self.inputs, args)}
        feeds.update(kwargs)
        return self.run(feeds)

    def run(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        arrays = self._arrays(feeds)
        outs = self._plan({k: a.shape for k, a in arrays.items()}).run(arrays)
        return {v.name: out for v, out in zip(self.outputs, outs)}

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Inputs of the bound shapes: normal floats, small non-negative ints, random bools."""
        rng = np.random.default_rng(seed)
        check_fits(sum(math.prod(v.shape) * v.dtype.itemsize for v in self.inputs),
                   "random inputs " + ", ".join(f"{v.name} ({'x'.join(map(str, v.shape))} "
                                                f"{v.dtype})" for v in self.inputs))
        out = {}
        for v in self.inputs:
            array = np.empty(v.shape, v.dtype)
            flat = array.reshape(-1)
            # drawn in pieces, so the draws' float64 or int64 never take the whole size again;
            # the values are those of one draw of the whole (pieces of an even length)
            for start in range(0, flat.size, _DRAW_PIECE):
                n = min(_DRAW_PIECE, flat.size - start)
                if v.dtype.kind == "f":
                    flat[start:start + n] = rng.standard_normal(n)
                elif v.dtype.kind in "iu":
                    flat[start:start + n] = rng.integers(0, 4, n)
                else:
                    flat[start:start + n] = rng.random(n) < 0.5
            out[v.name] = array
        return out

    def _plan_for(self, inputs: Optional[dict[str, Any]]):
        """The plan for these inputs (arrays or shapes; default: the bound input shapes)."""
        shapes = {v.name: tuple(v.shape) for v in self.inputs}
        for name, value in (inputs or {}).items():
            shapes[name] = tuple(np.shape(value)) if not isinstance(value, tuple) else value
        return self._plan(shapes)

    def schedule(self, inputs: Optional[dict[str, Any]] = None) -> list[ScheduleItem]:
        """The scheduled kernels of the model for these inputs (arrays or shapes; default: the
        bound input shapes), in run order. Built once per set of shapes and shared with runs."""
        return list(self._plan_for(inputs).items)

    def constant_inputs(self, inputs: Optional[dict[str, Any]] = None
                        ) -> dict[str, frozenset[int]]:
        """Per kernel key of `schedule(inputs)`, the input buffers that hold weights (constant
        once the plan is built), where every occurrence of the kernel has them: tuning times
        the kernel with those operands packed ahead, as the plan runs it."""
        plan = self._plan_for(inputs)
        out: dict[str, frozenset[int]] = {}
        for item, constants in zip(plan.items, plan.constant_inputs()):
            key = item.kernel.key
            out[key] = out[key] & constants if key in out else constants
        return out

    def profile(self, inputs: Optional[dict[str, Any]] = None, repeat: int = 10) -> Profile:
        """Time whole calls, and each kernel where it runs in the sequence (after one warm-up
        call): medians of `repeat` runs. These calls are not traced (DEBUG=2, GRAPH=1): a traced
        call times its kernels one by one."""
        arrays = self._arrays(inputs or self.random_inputs())
        plan = self._plan({k: a.shape for k, a in arrays.items()})
        plan.run(arrays, trace=False)
        calls = []
        for _ in range(repeat):
            start = time.perf_counter()
            plan.run(arrays, trace=False)
            calls.append(time.perf_counter() - start)
        plan.copy_inputs(arrays)  # the kernels timed one by one read the inputs' buffers
        per_step: list[list[float]] = [[] for _ in plan.steps]
        for _ in range(repeat):
            for times, step in zip(per_step, plan.steps):
                times.append(step.program.timed(step.buffers))
        kernels = tuple((s.kernel, statistics.median(t)) for s, t in zip(plan.steps, per_step))
        return Profile(statistics.median(calls), sum(t for _, t in kernels), kernels,
                       sum(s.choice.tuned for s in plan.steps))

    def use_lookup(self, lookup: TunedConfigs) -> None:
        """Run with the tuned configs of `lookup` from the next call on (not traced again)."""
        self.lookup = lookup
        for plan in self._plans.values():
            plan.use_lookup(lookup)

    def reset_plans(self) -> None:
        """Forget the traced plans: the next call traces again, with fresh buffers."""
        self._plans.clear()

    # ---- plans
    def _arrays(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        names = [v.name for v in self.inputs]
        unknown = sorted(set(feeds) - set(names))
        missing = [n for n in names if n not in feeds]
        if unknown or missing:
            raise InputError(f"the model's inputs are {names}" +
                             (f"; missing {missing}" if missing else "") +
                             (f"; unknown {unknown}" if unknown else ""))
        arrays = {}
        for v in self.inputs:
            array, accepts = np.asarray(feeds[v.name]), self._accepts[v.name]
            if len(array.shape) != len(accepts) or any(
                    d is not None and d != s for d, s in zip(accepts, array.shape)):
                raise InputError(f"input '{v.name}' has shape {array.shape}; the model takes "
                                 f"{tuple('?' if d is None else d for d in accepts)}")
            arrays[v.name] = array
        return arrays

    def _plan(self, shapes: dict[str, tuple]) -> Plan:
        key = tuple((v.name, tuple(shapes[v.name])) for v in self.inputs)
        if key not in self._plans:
            # each input twice (the caller's array, the plan's buffer), checked before the trace
            # allocates the plan's; then with the largest kernel's buffers, or the outputs twice
            # (the plan's buffers, the arrays a call returns), before the first run
            dtypes = {v.name: np.dtype(internal_dtype(v.dtype).np) for v in self.inputs}
            sizes = {name: math.prod(shape) * dtypes[name].itemsize for name, shape in key}
            what = "inputs " + ", ".join(f"{name} ({'x'.join(map(str, shape)) or 'scalar'} "
                                         f"{dtypes[name]})" for name, shape in key)
            check_fits(2 * sum(sizes.values()), what)
            inputs, outs = self.trace(dict(key))
            device = get_device(self.device)
            plan = Plan(device, inputs, outs, [v.dtype for v in self.outputs],
                        [v.name for v in self.outputs], lookup=self.lookup)
            if device.host_memory:
                returned = sum(math.prod(o.shape) * np.dtype(o.dtype.np).itemsize for o in outs
                               if isinstance(o, Tensor))
                check_fits(2 * sum(sizes.values()) + max(plan.largest_step_bytes(), 2 * returned),
                           f"{what}, the model's kernels and outputs")
            self._plans[key] = plan
        return self._plans[key]

    def trace(self, shapes: dict[str, tuple]) -> tuple[dict[str, Tensor], list[Any]]:
        """The model as Tensor calls on placeholder inputs: (input tensors, output values), each
        output a Tensor or a numpy array (an output known at import)."""
        values: dict[str, Any] = dict(self._constants)
        inputs = {}
        for v in self.inputs:
            dt = internal_dtype(v.dtype)
            inputs[v.name] = values[v.name] = Tensor.placeholder(shapes[v.name], dt,
                                                                 self.device)
        for node in self._nodes:
            ctx = NodeContext(node, self.opset, self.device)
            for name in node.input:
                if name and name not in values:
                    raise OnnxImportError(f"{node.op_type} node '{ctx.name}' reads '{name}', "
                                          "which no node or input defines before it")
            args = [values[name] if name else None for name in node.input]
            try:
                outs = _evaluate(ctx, args)
            except OnnxImportError:
                raise
            except Exception as exc:  # a shape or value the operator cannot take: one line
                first = (str(exc).splitlines() or [type(exc).__name__])[0]
                raise OnnxImportError(f"{node.op_type} node '{ctx.name}': {first}") from exc
            if any(node.output[len(outs):]):  # names past what the operator makes
                raise OnnxImportError(f"{node.op_type} node '{ctx.name}' makes {len(outs)} "
                                      f"output(s); the model names {len(node.output)}")
            for name, value in zip(node.output, outs):
                if name:
                    if isinstance(value, Tensor) and self._fanout[name] > 1 and \
                            name not in self._lazy_fanout:
                        value = value.materialize_as_stored()
                    values[name] = value
        return inputs, [values[v.name] for v in self.proto.graph.output]


def _evaluate(ctx: NodeContext, args: list) -> tuple:
    """Run one node: folded on the host when every input is known, else as Tensor calls."""
    spec = OPS[ctx.op]
    known = all(not isinstance(a, Tensor) for a in args)
    if spec.movement:
        args = [a.materialize() if isinstance(a, Tensor) and a.ends_in_reduce() else a
                for a in args]
    if known and spec.host is not None:
        out = spec.host(ctx, *args)
    else:
        out = spec.fn(ctx, *args)
    outs = out if isinstance(out, tuple) else (out,)
    if known:
        outs = tuple(v.numpy() if isinstance(v, Tensor) else v for v in outs)
    return tuple(v if isinstance(v, Tensor) else np.asarray(v) for v in outs)

