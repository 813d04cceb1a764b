"""GRAPH=1: a Graphviz drawing of the kernels that really ran (kept by kernel_run.py), and an
SVG and a PNG where `dot` exists. The .dot file is rewritten after every schedule or model call
(`save_graph`); it is rendered once, when the process exits.

Kernels are boxes numbered in the order they ran, top to bottom, each labelled with its time
and whether it ran with a tuned config (green) or the default (grey). An edge is a buffer that
one kernel wrote and a later one read, labelled with the buffer's number, dtype and shape; a
buffer that came from the host (an input, a weight) is an ellipse, and so is a named output.
"""
from __future__ import annotations

import atexit
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from tunesearch import settings
from tunesearch.errors import SettingError
from tunesearch.runtime import kernel_run
from tunesearch.runtime.kernel_run import KernelRun

TUNED_COLOR, DEFAULT_COLOR, HOST_COLOR = "#b7e4c7", "#e9ecef", "#fff3bf"
_saved: list[str] = []  # the .dot file written last, rendered at exit


def _quote(text: str) -> str:
    """A DOT string literal; a newline becomes a centred line break."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _time(seconds: float) -> str:
    return f"{max(seconds, 1e-9) * 1e6:.1f} us"


def dot_text(runs: Sequence[KernelRun], buffer_labels: dict[int, str] | None = None) -> str:
    """The DOT source of a drawing of `runs`; buffer_labels names buffers by serial number (a
    model's inputs and outputs)."""
    labels = buffer_labels or {}
    total = sum(run.seconds for run in runs)
    devices = ", ".join(dict.fromkeys(run.device for run in runs))
    total_text = f"{total * 1e3:.3f} ms" if total >= 1e-3 else _time(total)
    title = (f"{len(runs)} kernels on {devices}: {total_text} of kernel time, "
             f"{sum(run.tuned for run in runs)} tuned (green), in the order they ran")
    lines = ["digraph kernels {",
             f"  label={_quote(title)}; labelloc=t; rankdir=TB; nodesep=0.3; ranksep=0.35;",
             '  fontname="Helvetica"; fontsize=12;',
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8, color="#495057"];']
    producer: dict[int, int] = {}  # buffer serial -> the kernel that wrote it last
    number: dict[int, int] = {}    # buffer serial -> its number in the drawing
    edges: set[tuple[str, str, int]] = set()

    def edge(src: str, dst: str, serial: int, text: str) -> None:
        if (src, dst, serial) not in edges:
            edges.add((src, dst, serial))
            lines.append(f"  {src} -> {dst} [label={_quote(text)}];")

    for i, run in enumerate(runs):
        kernel = run.kernel
        label = (f"#{i + 1} {kernel.name}\n{_time(run.seconds)}  "
                 f"{'tuned' if run.tuned else 'default'}\n"
                 f"{run.gflops:.2f} GFLOPS  {run.gbps:.2f} GB/s")
        color = TUNED_COLOR if run.tuned else DEFAULT_COLOR
        lines.append(f"  k{i} [label={_quote(label)}, fillcolor={_quote(color)}];")
        if i:  # keeps the boxes in run order, top to bottom
            lines.append(f"  k{i - 1} -> k{i} [style=invis];")
        for serial, spec in zip(run.reads, kernel.buffers[1:]):
            b = number.setdefault(serial, len(number))
            if serial in producer:
                writer = runs[producer[serial]].kernel
                shape = "x".join(map(str, writer.out_shape or (1,)))
                edge(f"k{producer[serial]}", f"k{i}", serial,
                     f"b{b} {writer.buffers[0].dtype.name} {shape}")
            else:
                host = f"h{serial}"
                if (host, host, serial) not in edges:
                    edges.add((host, host, serial))
                    text = f"{labels.get(serial, 'host')}\nb{b} {spec.dtype.name}[{spec.size}]"
                    lines.append(f"  {host} [label={_quote(text)}, shape=ellipse, fontsize=8, "
                                 f"fillcolor={_quote(HOST_COLOR)}];")
                edge(host, f"k{i}", serial, "")
        number.setdefault(run.writes, len(number))
        producer[run.writes] = i
    for serial, text in labels.items():
        if serial in producer:  # a buffer a kernel wrote and the caller named: an output
            writer = runs[producer[serial]].kernel
            shape = "x".join(map(str, writer.out_shape or (1,)))
            lines.append(f"  o{serial} [label={_quote(text)}, shape=ellipse, fontsize=8, "
                         f"fillcolor={_quote(HOST_COLOR)}];")
            edge(f"k{producer[serial]}", f"o{serial}", serial,
                 f"b{number[serial]} {writer.buffers[0].dtype.name} {shape}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_dot(runs: Sequence[KernelRun], path: Path, buffer_labels: dict[int, str]) -> None:
    """Write the drawing of `runs` to `path` (a .dot file)."""
    try:
        Path(path).write_text(dot_text(runs, buffer_labels))
    except OSError as err:
        raise SettingError(f"GRAPH=1 cannot write {path} (GRAPH_PATH): "
                           f"{err.strerror or err}") from None


def render(path: str | Path) -> str:
    """Render a .dot file to .svg and .png beside it with Graphviz's `dot`; returns one line
    that says what was written (and, without `dot`, how to render it)."""
    path = Path(path)
    svg, png = path.with_suffix(".svg"), path.with_suffix(".png")
    dot = shutil.which("dot")
    if dot is None:
        return (f"GRAPH=1: wrote {path}; Graphviz's `dot` is not installed (apt install graphviz,"
                f" brew install graphviz), then: dot -Tsvg {path} -o {svg}")
    for fmt, out in (("svg", svg), ("png", png)):
        done = subprocess.run([dot, f"-T{fmt}", str(path), "-o", str(out)], capture_output=True,
                              text=True, timeout=300)
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["no message"])[0]
            return f"GRAPH=1: wrote {path}; dot could not render it: {reason}"
    return f"GRAPH=1: wrote {path}, {svg} and {png}"


def save_graph() -> str | None:
    """Write the .dot file of the kernels drawn so far (GRAPH=1); returns its path. The picture
    is rendered when the process exits (`render_graph`)."""
    runs, buffer_labels = kernel_run.drawn()
    if not settings.graph() or not runs:
        return None
    path = settings.graph_path()
    write_dot(runs, path, buffer_labels)
    if not _saved:
        atexit.register(render_graph)
    _saved[:] = [str(path)]
    return str(path)


def render_graph() -> None:
    """Render the last .dot written to SVG and PNG, and say in one line where they are."""
    if _saved:
        try:
            print(render(_saved[0]), file=sys.stderr)
        except (OSError, subprocess.SubprocessError) as exc:  # at exit: one line, no traceback
            print(f"GRAPH=1: wrote {_saved[0]}; rendering it failed: {exc}", file=sys.stderr)
