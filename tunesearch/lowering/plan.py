"""Running a schedule, once or over and over: the one way kernels run, for a model, a traced
Tensor program (`tunesearch.traced`) and a single `Tensor.realize` alike. The schedule is built
once per set of input shapes, every kernel gets its program and its buffers once, and each call
runs the same programs in order on new inputs: read where the caller keeps them on the CPU, copied
into the same input buffers elsewhere.

Intermediate buffers are recycled: a buffer whose last reader has run is handed to a later kernel
that writes the same size, so a deep model needs a few live activations, not one per kernel.

Each kernel runs with the config the plan's lookup of tuned configs chooses
(`runtime.lookup.TunedConfigs`, given by the model).
"""
from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunesearch.graph.kernel import Kernel
from tunesearch.graph.schedule import create_schedule, backing_node
from tunesearch.runtime import graphviz, kernel_run, realize
from tunesearch.runtime.device import Buffer, Device, Program
from tunesearch.runtime.kernel_run import KernelRun
from tunesearch.runtime.lookup import Choice, TunedConfigs


@dataclass(frozen=True)
class Step:
    program: Program
    buffers: list[Buffer]
    kernel: Kernel
    choice: Choice


def _is_value(value) -> bool:
    """A traced value (a Tensor: it has a lazy graph node), not an array known at trace time."""
    return hasattr(value, "node")


class Plan:
    """A traced model or program for one set of input shapes: its kernels, programs and buffers,
    replayed per call. Built from the input tensors and the output values (Tensors, or arrays
    known at import) of a trace; configs chosen by `lookup`, compiled and given buffers on the
    first run. once: a single run (`Tensor.realize`): no buffer is handed on, since the caller's
    other tensors may still read any value it computes, and no constant is packed ahead, since
    a kernel packs what it reads as cheaply once."""

    def __init__(self, device: Device, inputs: dict[str, Any], outs: list[Any],
                 out_dtypes: list[np.dtype], out_names: list[str] | None = None, *,
                 lookup: TunedConfigs, once: bool = False, label: str = "model plan"):
        self.device = device
        self.once, self.label = once, label
        self.lookup = lookup
        self.out_names = out_names or [f"#{i}" for i in range(len(outs))]
        self._shapes = {name: tuple(t.shape) for name, t in inputs.items()}
        self.input_buffers = {name: backing_node(t.node).realized for name, t in inputs.items()}
        self.input_dtypes = {name: t.dtype.np for name, t in inputs.items()}
        roots = [backing_node(v.node) or v.node for v in outs if _is_value(v)]
        self.items = create_schedule(roots)
        if not once:
            self.items = self._fold_constants(self.items)
        self._outs = [(dtype, value, backing_node(value.node) or value.node
                       if _is_value(value) else None)
                      for dtype, value in zip(out_dtypes, outs)]
        self.steps: list[Step] = []
        self._launch = None
        self._rebound_outs: list | None = None  # see _fresh_outputs
        self._keep = {id(r) for r in roots}

    def _fold_constants(self, items: list) -> list:
        """Run now, once, every kernel that reads only constants (a Tensor program's weight
        laid out for its convolution, which ONNX lays out on the host at import), and leave
        out of the plan: a call runs only the kernels its inputs reach. The kernels after it
        see its output as a constant, to pack ahead like any weight."""
        fed = {id(b) for b in self.input_buffers.values()}
        writes = Counter(id(item.out) for item in items)
        known: set[int] = set()
        kept = []
        for item in items:
            constant = writes[id(item.out)] == 1 and all(
                id(node) in known or (writes[id(node)] == 0 and node.realized is not None
                                      and id(node.realized) not in fed)
                for node in item.inputs)
            if not constant:
                kept.append(item)
                continue
            choice = self.lookup.choose(item.kernel, self.device)
            program = realize.get_program(item.kernel, self.device, choice.config)
            spec = item.kernel.buffers[0]
            out = self.device.alloc(spec.size, spec.dtype)
            program([out] + [node.realized for node in item.inputs])
            item.out.realized = out
            known.add(id(item.out))
        if known:
            self.device.synchronize()
        return kept

    def use_lookup(self, lookup: TunedConfigs) -> None:
        """Choose the configs with `lookup` from the next run on: the plan is prepared again
        (configs, programs, buffers), not traced again."""
        self.lookup = lookup
        self.steps = []
        self._launch = None

    def _prepare(self) -> None:
        """Choose configs, pack the constant operands a config packs (once, here), compile (in
        parallel), and give every kernel its buffers."""
        device, items = self.device, self.items
        weights = self.constant_inputs() if not self.once else [frozenset()] * len(items)
        choices = [self.lookup.choose(item.kernel, device, constants)
                   for item, constants in zip(items, weights)]
        panels = self._prepacked(choices, weights)
        compile_all(device, [(item.kernel, c.config, frozenset(p))
                             for item, c, p in zip(items, choices, panels)])
        last_use = {}
        for i, item in enumerate(items):
            for node in item.inputs:
                last_use[id(node)] = i
        pool = BufferPool(device)
        made: set[int] = set()
        steps = []
        for i, (item, choice) in enumerate(zip(items, choices)):
            spec = item.kernel.buffers[0]
            if id(item.out) in made:  # the next piece of a concatenation: the same buffer
                out = item.out.realized
            else:
                out = pool.take(spec.size, spec.dtype)
            item.out.realized = out
            made.add(id(item.out))
            program = realize.get_program(item.kernel, device, choice.config,
                                          frozenset(panels[i]))
            buffers = [out] + [panels[i].get(j + 1, node.realized)
                               for j, node in enumerate(item.inputs)]
            steps.append(Step(program, buffers, item.kernel, choice))
            for node in item.inputs:  # buffers read for the last time go back to the pool
                if not self.once and id(node) in made and last_use[id(node)] == i and \
                        id(node) not in self._keep:
                    pool.give(node.realized)
        self.steps = steps
        self._launch = None  # bound on the first launch
        self._rebound_outs = None
        kernel_run.print_schedule(self.label, [step.kernel for step in steps],
                                  sum(step.choice.tuned for step in steps))

    def largest_step_bytes(self) -> int:
        """The bytes of the kernel whose output and intermediate operands (results of other
        kernels) are the largest: buffers that must all exist while it runs, whatever the
        pool shares (the model's inputs and weights not counted)."""
        written = {id(item.out) for item in self.items}
        most = 0
        for item in self.items:
            specs = item.kernel.buffers
            held = {id(item.out): specs[0].size * specs[0].dtype.itemsize}
            for spec, node in zip(specs[1:], item.inputs):
                if id(node) in written:
                    held[id(node)] = spec.size * spec.dtype.itemsize
            most = max(most, sum(held.values()))
        return most

    def constant_inputs(self) -> list[frozenset[int]]:
        """Per kernel, the indices of its input buffers that no kernel writes and no call feeds
        (the model's weights): their contents never change once the plan is built."""
        written = {id(item.out) for item in self.items}
        fed = {id(b) for b in self.input_buffers.values()}
        return [frozenset(j + 1 for j, node in enumerate(item.inputs)
                          if id(node) not in written and node.realized is not None
                          and id(node.realized) not in fed)
                for item in self.items]

    def _prepacked(self, choices: list[Choice], weights: list[frozenset[int]]
                   ) -> list[dict[int, Buffer]]:
        """Per kernel, {buffer index: its panel} for the constant operands its config reads
        packed (Device.prepack_layouts): packed now, once, so calls skip the packing. The
        occurrences of one kernel that read one weight in one layout share its panel. weights:
        per kernel, its constant inputs (constant_inputs)."""
        contents: dict[int, np.ndarray] = {}
        panels: dict[tuple, Buffer] = {}
        out = []
        for item, choice, constants in zip(self.items, choices, weights):
            mine = {}
            layouts = self.device.prepack_layouts(item.kernel, choice.config, constants) \
                if choice.config else {}
            for index, layout in layouts.items():
                realized = item.inputs[index - 1].realized
                key = (id(realized), index, item.kernel.key, layout)
                if key not in panels:
                    if id(realized) not in contents:
                        contents[id(realized)] = self.device.copyout(realized)
                    panel = self.device.prepack(item.kernel, choice.config, index,
                                                contents[id(realized)])
                    panels[key] = self.device.from_numpy(panel, realized.dtype)
                mine[index] = panels[key]
            out.append(mine)
        return out

    def copy_inputs(self, arrays: dict[str, np.ndarray]) -> None:
        """Copy the inputs into the plan's input buffers, where its kernels launched one by
        one read them (a call may have read them in place instead)."""
        for name, buffer in self.input_buffers.items():
            self.device.copyin(buffer, self._input(arrays, name).reshape(-1))

    def _input(self, arrays: dict[str, np.ndarray], name: str) -> np.ndarray:
        """The input `name` C-contiguous in its dtype (a copy only where it is not already)."""
        return np.ascontiguousarray(arrays[name], self.input_dtypes[name])

    def launch(self) -> None:
        self._bound()()
        self.device.synchronize()

    def _bound(self):
        """The plan's launches, bound once (Device.sequence)."""
        if self._launch is None:
            self._launch = self.device.sequence([(s.program, s.buffers) for s in self.steps])
            outputs = {id(root.realized) for _, _, root in self._outs if root is not None}
            self._in_place = {name for name, b in self.input_buffers.items()
                              if id(b) not in outputs}
        return self._launch

    def execute(self) -> None:
        """Run every kernel once on what the input buffers hold (timed and recorded with DEBUG=2
        and up or GRAPH=1): a single realize."""
        if len(self.steps) != len(self.items):
            self._prepare()
        if kernel_run.tracing():
            self._traced_launch(new_call=False)
        else:
            self.launch()

    def run(self, arrays: dict[str, np.ndarray], trace: bool = True) -> list[np.ndarray]:
        """Copy the inputs in, run every kernel, copy the outputs out (in graph order). Where
        the device's launches can be pointed at other memory (the CPU's: `rebind`), an input
        that no output is, C-contiguous and of its dtype, is read in place, not copied, and an
        output that the call's kernels write is written straight into the array returned (a
        language model's logits, tokens x vocabulary, are then not copied again). With
        DEBUG=2 and up or GRAPH=1 each kernel is timed and recorded, unless `trace` is False
        (a timing loop)."""
        if len(self.steps) != len(self.items):
            self._prepare()
        device = self.device
        traced = trace and kernel_run.tracing()
        launch = None if traced else self._bound()
        rebind = getattr(launch, "rebind", None)
        rebound = []
        fresh = self._fresh_outputs() if rebind is not None else {}
        try:
            for buffer, array in fresh.values():
                rebind(buffer, array)
                rebound.append(buffer)
            for name, buffer in self.input_buffers.items():
                array = self._input(arrays, name)
                if rebind is not None and name in self._in_place and array.flags.aligned \
                        and array.size == buffer.size:
                    rebind(buffer, array)
                    rebound.append(buffer)
                else:
                    device.copyin(buffer, array.reshape(-1))
            if traced:
                self._traced_launch()
            else:
                launch()
                device.synchronize()
        finally:
            for buffer in rebound:  # nothing keeps the caller's array past the call
                rebind(buffer)
        results, taken = [], set()
        for dtype, value, root in self._outs:
            if root is None:
                array = np.asarray(value)
            elif id(root.realized) in fresh:  # a second output of a buffer gets a copy
                array = fresh[id(root.realized)][1][:value.numel()].reshape(value.shape)
                array = array.copy() if id(root.realized) in taken else array
                taken.add(id(root.realized))
            else:
                array = device.copyout(root.realized)[:value.numel()].reshape(value.shape)
            results.append(array.astype(dtype, copy=False))
        return results

    def _fresh_outputs(self) -> dict:
        """A new array for each output buffer that the call's kernels write whole (not an
        input, not a constant folded when the plan was built): (buffer, array) by the
        buffer's id. Which buffers those are is found once per prepared plan."""
        if self._rebound_outs is None:
            written = {id(step.buffers[0]) for step in self.steps}
            inputs = {id(b) for b in self.input_buffers.values()}
            buffers = {id(root.realized): root.realized for _, _, root in self._outs
                       if root is not None and id(root.realized) in written}
            self._rebound_outs = [b for key, b in buffers.items() if key not in inputs]
        return {id(b): (b, np.empty(b.size, b.dtype.np)) for b in self._rebound_outs}

    def _traced_launch(self, new_call: bool = True) -> None:
        """Run every kernel timed, recording each (see `runtime.kernel_run`); new_call: a
        model call, which starts the GRAPH drawing anew (a realize adds to it)."""
        labels = {buffer.serial: f"input '{name}' {_dims(self._shapes[name])}"
                  for name, buffer in self.input_buffers.items()}
        for name, (_, value, root) in zip(self.out_names, self._outs):
            if root is not None and root.realized is not None:
                labels.setdefault(root.realized.serial, f"output '{name}' {_dims(value.shape)}")
        written = {step.buffers[0].serial for step in self.steps}
        for step in self.steps:  # the rest of what comes from the host: initializers, folds
            for buffer in step.buffers[1:]:
                if buffer.serial not in written:
                    labels.setdefault(buffer.serial, "constant")
        if new_call:
            kernel_run.begin_call(labels)
        name = self.device.name
        for step in self.steps:
            seconds = step.program.timed(step.buffers)
            kernel_run.record(KernelRun.of(step.kernel, name, seconds, step.choice.config,
                                           step.choice.tuned, step.buffers))
        self.device.synchronize()
        graphviz.save_graph()


class BufferPool:
    """The buffers of a plan's intermediate results. A result takes the smallest freed buffer
    that holds it, the most recently freed among equal ones (its lines are the likeliest to
    still be in cache): part of a larger one where the device can address part of a buffer
    (Device.part), else one of its exact size; a new buffer only where none is free. Best fit
    keeps the footprint near that of the results live at once, so more of them stay in cache
    from one run to the next (squeezenet kept 27 buffers, 13.4 MiB, when only equal sizes
    were shared)."""

    def __init__(self, device: Device):
        self.device = device
        self.free: list[Buffer] = []       # freed buffers, the most recent last
        self.whole: dict[int, Buffer] = {}  # serial of a part -> the buffer it is part of

    def take(self, size: int, dtype) -> Buffer:
        fits = sorted((b.size, -n, n) for n, b in enumerate(self.free)
                      if b.dtype.name == dtype.name and b.size >= size)
        for _, _, n in fits:
            buffer = self.free[n]
            if buffer.size == size:
                return self.free.pop(n)
            part = self.device.part(buffer, size)
            if part is not None:
                self.whole[part.serial] = self.free.pop(n)
                return part
        return self.device.alloc(size, dtype)

    def give(self, buffer: Buffer) -> None:
        self.free.append(self.whole.pop(buffer.serial, buffer))


def _dims(shape) -> str:
    return "x".join(map(str, shape)) or "scalar"


def compile_all(device: Device, work: list[tuple[Kernel, Any, frozenset]]) -> None:
    """Compile every distinct (kernel, config) at once, so the C compiler uses every core; the
    programs are then loaded from the device's compile cache."""
    unique = {(k.key, c, p): (k, c, p) for k, c, p in work}
    if len(unique) < 2 or (os.cpu_count() or 1) < 2:
        return

    def build(pair):
        try:
            device.compile(device.render(*pair))
        except Exception:  # reported when the program is built for real
            pass
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        list(pool.map(build, unique.values()))
