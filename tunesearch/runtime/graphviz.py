"""GRAPH=1: a Graphviz drawing of the kernels that really ran, and a PNG/SVG where `dot` exists."""
from __future__ import annotations

import shutil
import subprocess

from tunesearch import settings
from tunesearch.errors import SettingError


def write_graph(ran: list) -> str:
    """Write the graph of the kernels that ran, with an edge for each buffer one kernel wrote and
    another read; buffers that came from the host are drawn as ellipses. Returns the .dot path."""
    path = settings.graph_path()
    lines = ["digraph kernels {", "  rankdir=TB; node [shape=box, fontname=monospace];"]
    producer: dict[int, str] = {}
    inputs: set[int] = set()
    for i, (kernel, device, seconds, out, reads) in enumerate(ran):
        label = (f"{kernel.name}\\n{device} {seconds * 1e6:.1f} us\\n"
                 f"{kernel.flops / max(seconds, 1e-9) / 1e9:.2f} GFLOPS")
        color = "lightblue" if kernel.n_reduce else "lightyellow"
        lines.append(f'  k{i} [label="{label}", style=filled, fillcolor={color}];')
        for node in reads:
            if node not in producer and node not in inputs:
                inputs.add(node)
                lines.append(f'  b{node} [label="buffer", shape=ellipse];')
            lines.append(f"  {producer.get(node, f'b{node}')} -> k{i};")
        producer[out] = f"k{i}"
    lines.append("}")
    try:
        path.write_text("\n".join(lines) + "\n")
    except OSError as err:
        raise SettingError(f"GRAPH=1 cannot write {path} (GRAPH_PATH): "
                           f"{err.strerror or err}") from None
    dot = shutil.which("dot")
    if dot:
        for fmt in ("svg", "png"):
            subprocess.run([dot, f"-T{fmt}", str(path), "-o", str(path.with_suffix("." + fmt))],
                           capture_output=True)
    return str(path)
