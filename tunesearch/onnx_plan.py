"""Replaying a traced model: the schedule is built once per set of input shapes, every kernel
gets its program and its buffers once, and each call copies new inputs into the same input buffers
and runs the same programs in order.

Intermediate buffers are recycled: a buffer whose last reader has run is handed to a later kernel
that writes the same size, so a deep model needs a few live activations, not one per kernel.
"""
from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunesearch import settings
from tunesearch.graph.kernel import Kernel
from tunesearch.graph.schedule import create_schedule, realize_target
from tunesearch.runtime import realize
from tunesearch.runtime.device import Buffer, Device, Program
from tunesearch.tensor import Tensor


@dataclass(frozen=True)
class Step:
    program: Program
    buffers: list[Buffer]
    kernel: Kernel
    choice: realize.Choice


class Plan:
    """A traced model for one set of input shapes: its kernels, programs and buffers, replayed
    per call. Built from the input tensors and the output values (Tensors, or arrays known at
    import) of a trace; compiled and given buffers on the first run."""

    def __init__(self, device: Device, inputs: dict[str, Tensor], outs: list[Any],
                 out_dtypes: list[np.dtype]):
        self.device = device
        self.input_buffers = {name: realize_target(t.node).realized for name, t in inputs.items()}
        self.input_dtypes = {name: t.dtype.np for name, t in inputs.items()}
        roots = [realize_target(v.node) or v.node for v in outs if isinstance(v, Tensor)]
        self.items = create_schedule(roots)
        self._outs = [(dtype, value, realize_target(value.node) or value.node
                       if isinstance(value, Tensor) else None)
                      for dtype, value in zip(out_dtypes, outs)]
        self.steps: list[Step] = []
        self._keep = {id(r) for r in roots}

    def _prepare(self) -> None:
        """Choose configs, compile (in parallel), and give every kernel its buffers."""
        device, items = self.device, self.items
        choices = [realize.choose_config(item.kernel, device) for item in items]
        compile_all(device, [(item.kernel, c.config) for item, c in zip(items, choices)])
        last_use = {}
        for i, item in enumerate(items):
            for node in item.inputs:
                last_use[id(node)] = i
        free: dict[tuple, list[Buffer]] = {}
        made: set[int] = set()
        steps = []
        for i, (item, choice) in enumerate(zip(items, choices)):
            spec = item.kernel.buffers[0]
            pool = free.get((spec.size, spec.dtype.name))
            out = pool.pop() if pool else device.alloc(spec.size, spec.dtype)
            item.out.realized = out
            made.add(id(item.out))
            program = realize.get_program(item.kernel, device, choice.config)
            buffers = [out] + [node.realized for node in item.inputs]
            steps.append(Step(program, buffers, item.kernel, choice))
            for node in item.inputs:  # buffers read for the last time go back to the pool
                if id(node) in made and last_use[id(node)] == i and id(node) not in self._keep:
                    free.setdefault((node.numel, node.dtype.name), []).append(node.realized)
        self.steps = steps
        if settings.debug() >= 1:
            print(f"onnx plan: {len(steps)} kernels", file=sys.stderr)

    def launch(self) -> None:
        for step in self.steps:
            step.program.run(step.buffers)
        self.device.synchronize()

    def run(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Copy the inputs in, run every kernel, copy the outputs out (in graph order)."""
        if len(self.steps) != len(self.items):
            self._prepare()
        device = self.device
        for name, buffer in self.input_buffers.items():
            device.copyin(buffer, np.ascontiguousarray(arrays[name], self.input_dtypes[name])
                          .reshape(-1))
        debug, graph = settings.debug(), settings.graph()
        if debug >= 2 or graph:
            ran = []
            for step in self.steps:
                seconds = step.program.timed(step.buffers)
                # buffers stand for the nodes here: a recycled one is drawn from its latest writer
                ran.append((step.kernel, device.name, seconds, id(step.buffers[0]),
                            tuple(id(b) for b in step.buffers[1:])))
                if debug >= 2:
                    print(realize.debug_line(step.kernel, device.name, step.choice, seconds),
                          file=sys.stderr)
                if debug >= 3:
                    print(f"    config: {step.choice.config}", file=sys.stderr)
            device.synchronize()
            realize.ran_kernels.extend(ran)
            if graph:  # this call's kernels: every call of a plan runs the same ones
                from tunesearch.runtime.graphviz import write_graph
                write_graph(ran)
        else:
            self.launch()
        results = []
        for dtype, value, root in self._outs:
            if root is None:
                array = np.asarray(value)
            else:
                array = device.copyout(root.realized)[:value.numel()].reshape(value.shape)
            results.append(array.astype(dtype, copy=False))
        return results


def compile_all(device: Device, work: list[tuple[Kernel, Any]]) -> None:
    """Compile every distinct (kernel, config) at once, so the C compiler uses every core; the
    programs are then loaded from the device's compile cache."""
    unique = {(k.key, c): (k, c) for k, c in work}
    if len(unique) < 2 or (os.cpu_count() or 1) < 2:
        return

    def build(pair):
        try:
            device.compile(device.render(*pair))
        except Exception:  # reported when the program is built for real
            pass
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        list(pool.map(build, unique.values()))
