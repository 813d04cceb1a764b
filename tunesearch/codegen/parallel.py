"""Parallel loops of a C kernel handed to the CPU's thread pool (runtime/cpu_pool.py).

The renderer writes a shared loop as OpenMP would read it (`shared_loop`: `#pragma omp parallel
for` with its collapse and thread count, then the loop). Here each such loop becomes a function
of a range of its (collapsed) iterations and a context struct of the variables it reads, and the
loop becomes a call of `ts_parallel`: the pool's caller runs whatever no worker has claimed,
which an OpenMP team cannot (its closing barrier waits for a thread the system has descheduled).
"""
from __future__ import annotations

import math
import re

# what a kernel that shares a loop declares: the entry point of the pool in runtime/cpu_pool.py
DECLARATION = ("void ts_parallel(long n, int threads, void (*body)(void*, long, long), void* ctx);\n"
               "void ts_parallel_grain(long n, int threads, long grain, "
               "void (*body)(void*, long, long), void* ctx);\n")

PRAGMA = re.compile(r"^(\s*)#pragma omp parallel for(?: collapse\((\d+)\))? "
                    r"num_threads\((\d+)\) schedule\(static\)(?: /\* flat (\d+) \*/)?"
                    r"(?: /\* k tiles (\d+) x (\d+) of (\d+), grain (\d+) \*/)?\s*$")


def shared_loop(threads: int, collapse: int = 1, flat: int = 0,
                tiles: tuple[int, int, int] | None = None) -> str:
    """The line that heads a loop shared over `threads` (its first `collapse` loops as one),
    as the renderer writes it and outline_parallel_loops reads it. flat: the number of loops
    nested right inside them that run in the same flat loop as they do (block loops: see
    codegen/c_entry.block_loops), each shared iteration a range of it. tiles: (ktile, the
    first reduce axis's size, grain): each thread walks its range once per k tile of that
    axis (k_tiles_open), handed runs cut at multiples of `grain` shared iterations."""
    walk = ""
    if tiles is not None:
        ktile, size, grain = tiles
        walk = f" /* k tiles {math.ceil(size / ktile)} x {ktile} of {size}, grain {grain} */"
    return (f"#pragma omp parallel for{f' collapse({collapse})' if collapse > 1 else ''} "
            f"num_threads({threads}) schedule(static)" + (f" /* flat {flat} */" if flat else "")
            + walk)


def k_tiles_open(tiles: int, ktile: int, size: int, indent: str = "  ") -> list[str]:
    """The loop over the k tiles of a reduce axis of `size`, opened, with each tile's start
    (k0), length (kn) and whether it is the first or the last: what the block functions of a
    tiled kernel read."""
    return [f"{indent}for (int kt = 0; kt < {tiles}; kt++) {{",
            f"{indent}  const int k0 = kt*{ktile}, first = kt == 0, last = kt == {tiles - 1};",
            f"{indent}  const int kn = last ? {size}-k0 : {ktile};"]


def flat_indices(names: list[str], bounds: list[int], indent: str = "  ") -> list[str]:
    """The declarations of the indices of nested loops (names, their counts, outermost first)
    taken from one flat index it_ over all of them."""
    lines = []
    for j, var in enumerate(names):
        inner = math.prod(bounds[j + 1:])
        flat = f"it_ / {inner}" if inner > 1 else "it_"
        if bounds[j] == 1:
            lines.append(f"{indent}const int {var} = 0;")
        else:
            lines.append(f"{indent}const int {var} = (int)({flat}" +
                         (f" % {bounds[j]});" if j > 0 else ");"))
    return lines


LOOP = re.compile(r"^\s*for \(int (\w+) = 0; \1 < ([^;]+); \1\+\+\)\s*(\{)?\s*$")
BARE_LOOP = re.compile(r"^\s*for \(.*\)\s*$")


def _statement_end(lines: list[str], start: int, opened: bool) -> int:
    """The index after the statement that starts at lines[start] (the body of a loop whose
    header opened a brace already, where opened)."""
    depth, i = int(opened), start
    if not opened:
        while BARE_LOOP.match(lines[i]):  # inner loops without braces head the statement
            i += 1
        depth = lines[i].count("{") - lines[i].count("}")
        i += 1
    while depth > 0:
        depth += lines[i].count("{") - lines[i].count("}")
        i += 1
    return i


def outline_parallel_loops(lines: list[str], name: str, captures: list[tuple[str, str]]
                           ) -> tuple[list[str], list[str]]:
    """(the functions of the shared loops, the lines with each loop replaced by its call).
    captures: (declaration, variable) of everything a loop may read from the function around
    it (the kernel's buffers, panels, a k tile's bounds), e.g. ("const float* restrict",
    "data1"); each loop's function gets them all through its context."""
    functions: list[str] = []
    out: list[str] = []
    fields = "".join(f" {decl.replace(' restrict', '')} {var};" for decl, var in captures)
    values = ", ".join(var for _, var in captures)
    i = count = 0
    while i < len(lines):
        pragma = PRAGMA.match(lines[i])
        if pragma is None:
            out.append(lines[i])
            i += 1
            continue
        indent, collapse, threads = pragma.group(1), int(pragma.group(2) or 1), pragma.group(3)
        loops = collapse + int(pragma.group(4) or 0)
        tiles = tuple(int(g) for g in pragma.group(5, 6, 7)) if pragma.group(5) else None
        grain = int(pragma.group(8) or 1)
        heads = [LOOP.match(line) for line in lines[i + 1:i + 1 + loops]]
        assert all(heads), lines[i:i + 1 + loops]
        opened = heads[-1].group(3) is not None
        end = _statement_end(lines, i + 1 + loops, opened)
        fn = f"{name}_loop{count}"
        count += 1
        bounds = [h.group(2).strip() for h in heads]
        functions += _loop_function(fn, heads, bounds, lines[i + 1 + loops:end], opened,
                                    fields, captures, collapse, tiles)
        total = "*".join(f"(long)({b})" for b in bounds[:collapse])
        call = f"ts_parallel_grain({total}, {threads}, {grain}, " if tiles else \
            f"ts_parallel({total}, {threads}, "
        out.append(f"{indent}{{ struct {fn}_ctx ctx_ = {{{values}}}; {call}{fn}, &ctx_); }}")
        i = end
    return functions, out


def _loop_function(fn: str, heads, bounds: list[str], body: list[str], opened: bool,
                   fields: str, captures: list[tuple[str, str]], shared: int,
                   tiles: tuple[int, int, int] | None = None) -> list[str]:
    """A loop's function: its context struct, the captured variables, the range of flat
    iterations and each loop's index in it, around the loop's body. The range handed out
    counts iterations of the first `shared` loops; the loops after them run inside each.
    tiles: (count, ktile, size): the range walked once per k tile (shared_loop)."""
    names = [h.group(1) for h in heads]
    unpack = [f"  {decl} {var} = ctx_->{var};" for decl, var in captures]
    head = [f"struct {fn}_ctx {{{fields} }};",
            f"static void {fn}(void* c_, long lo_, long hi_) {{",
            f"  const struct {fn}_ctx* ctx_ = (const struct {fn}_ctx*)c_;"] + unpack
    if len(names) == 1:  # the loop as it was, over the range handed out
        var = names[0]
        loop = [f"  for (int {var} = (int)lo_; {var} < (int)hi_; {var}++)"
                + (" {" if opened else "")] + body
    else:
        # collapsed loops: one flat index over their counts, the renderer's constants
        assert all(b.isdigit() for b in bounds), bounds
        inside = math.prod(int(b) for b in bounds[shared:])
        scale = f" * {inside}" if inside > 1 else ""
        index = flat_indices(names, [int(b) for b in bounds], "    ")
        loop = ([f"  for (long it_ = lo_{scale}; it_ < hi_{scale}; it_++) {{"] + index
                + (["    {"] if opened else []) + ["  " + line for line in body] + ["  }"])
    if tiles:
        loop = k_tiles_open(*tiles) + ["  " + line for line in loop] + ["  }"]
    return head + loop + ["}", ""]


__all__ = ["DECLARATION", "flat_indices", "k_tiles_open", "outline_parallel_loops",
           "shared_loop"]
