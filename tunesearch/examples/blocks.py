"""Models built in code with onnx.helper, seeded random weights: a transformer encoder block and
an MLP with awkward sizes, each a real workload for `tunesearch tune` and the benchmarks.

    >>> from tunesearch.examples import blocks
    >>> blocks.model("odd_mlp")             # an onnx.ModelProto with fixed input shapes
    >>> blocks.transformer_block(shape=(1, 64))   # x of shape (1, 64, 32)
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _init(inits: list, rng, name: str, shape, scale: float = 0.1) -> str:
    inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                         name))
    return name


def _const(inits: list, name: str, value) -> str:
    inits.append(numpy_helper.from_array(np.asarray(value), name))
    return name


def transformer_block(d: int = 32, heads: int = 4, ff: int = 64, seed: int = 0,
                      max_len: int = 64, shape: tuple[int, int] | None = None) -> onnx.ModelProto:
    """A pre-norm transformer encoder block over x ('batch', 'seq', d), written the way
    exporters write it: head shapes computed by Shape -> Gather -> Concat -> Reshape, a causal
    mask sliced to the sequence length, softmax attention, and GELU spelled with Erf.
    shape=(batch, seq) fixes the input's first two dims (seq at most max_len)."""
    if shape is not None and shape[1] > max_len:
        raise ValueError(f"seq {shape[1]} is longer than the causal mask (max_len={max_len})")
    rng, inits, nodes = np.random.default_rng(seed), [], []
    dh = d // heads

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def linear(x, name, n_in, n_out):
        w = _init(inits, rng, f"{name}.w", (n_in, n_out), 1 / np.sqrt(n_in))
        b = _init(inits, rng, f"{name}.b", (n_out,))
        return node("Add", [node("MatMul", [x, w], f"{name}.mm"), b], name)

    def layer_norm(x, name):
        g = _const(inits, f"{name}.g", (1 + 0.1 * rng.standard_normal(d)).astype(np.float32))
        b = _init(inits, rng, f"{name}.b", (d,))
        return node("LayerNormalization", [x, g, b], name, axis=-1, epsilon=1e-5)

    shape_of_x = node("Shape", ["x"], "shape")
    batch = node("Gather", [shape_of_x, _const(inits, "i0", np.array([0], np.int64))], "batch",
                 axis=0)
    seq = node("Gather", [shape_of_x, _const(inits, "i1", np.array([1], np.int64))], "seq", axis=0)
    heads_shape = node("Concat", [batch, seq, _const(inits, "hd", np.array([heads, dh], np.int64))],
                       "heads_shape", axis=0)
    flat_shape = node("Concat", [batch, seq, _const(inits, "dd", np.array([d], np.int64))],
                      "flat_shape", axis=0)
    h = layer_norm("x", "ln1")
    q, k, v = (node("Reshape", [linear(h, n, d, d), heads_shape], f"{n}.heads") for n in "qkv")
    q = node("Transpose", [q], "q.t", perm=[0, 2, 1, 3])
    k = node("Transpose", [k], "k.t", perm=[0, 2, 3, 1])
    v = node("Transpose", [v], "v.t", perm=[0, 2, 1, 3])
    scores = node("Div", [node("MatMul", [q, k], "qk"),
                          _const(inits, "scale", np.array(np.sqrt(dh), np.float32))], "scores")
    causal = _const(inits, "causal", np.tril(np.ones((max_len, max_len), bool)))
    ends = node("Concat", [seq, seq], "mask_ends", axis=0)
    mask = node("Slice", [causal, _const(inits, "zeros2", np.zeros(2, np.int64)), ends,
                          _const(inits, "axes01", np.array([0, 1], np.int64))], "mask")
    scores = node("Where", [mask, scores, _const(inits, "neg", np.array(-1e9, np.float32))],
                  "masked")
    probs = node("Softmax", [scores], "probs", axis=-1)
    attn = node("Transpose", [node("MatMul", [probs, v], "attn.heads")], "attn.t",
                perm=[0, 2, 1, 3])
    attn = linear(node("Reshape", [attn, flat_shape], "attn.flat"), "proj", d, d)
    x1 = node("Add", ["x", attn], "residual1")
    f = linear(layer_norm(x1, "ln2"), "ff1", d, ff)
    half = _const(inits, "half", np.array(0.5, np.float32))
    erf = node("Erf", [node("Div", [f, _const(inits, "sqrt2", np.array(np.sqrt(2), np.float32))],
                            "gelu.div")], "gelu.erf")
    gelu = node("Mul", [node("Mul", [f, half], "gelu.half"),
                        node("Add", [erf, _const(inits, "one", np.array(1, np.float32))],
                             "gelu.add")], "gelu")
    node("Add", [x1, linear(gelu, "ff2", ff, d)], "y")
    dims = list(shape) if shape is not None else ["batch", "seq"]
    graph = helper.make_graph(
        nodes, "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims + [d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims + [d])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def bench_transformer_block(seed: int = 0) -> onnx.ModelProto:
    """The transformer block at the benchmarks' size: batch 1, seq 64, d 128, 4 heads, ff 512."""
    return transformer_block(d=128, heads=4, ff=512, seed=seed, max_len=64, shape=(1, 64))


def mlp(name: str, batch, n_in: int, hidden: int, n_out: int, scales: tuple[float, float],
        seed: int = 0) -> onnx.ModelProto:
    """Gemm n_in->hidden + Relu, MatMul hidden->n_out + Add bias, Sigmoid over x (batch, n_in);
    batch is a size or a symbol. scales: the two weights' standard deviations."""
    rng, inits = np.random.default_rng(seed), []
    w1 = _init(inits, rng, "w1", (hidden, n_in), scales[0])
    b1 = _init(inits, rng, "b1", (hidden,))
    w2 = _init(inits, rng, "w2", (hidden, n_out), scales[1])
    b2 = _init(inits, rng, "b2", (n_out,))
    nodes = [helper.make_node("Gemm", ["x", w1, b1], ["h"], name="fc1", transB=1),
             helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("MatMul", ["hr", w2], ["o"], name="fc2"),
             helper.make_node("Add", ["o", b2], ["ob"], name="bias2"),
             helper.make_node("Sigmoid", ["ob"], ["y"], name="sigmoid")]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, n_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, n_out])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def odd_mlp(seed: int = 0) -> onnx.ModelProto:
    """An MLP whose sizes fit no vector width or tile: x (37, 1000), 1000 -> 333 -> 77, weights
    scaled 1/sqrt(fan_in)."""
    return mlp("odd_mlp", 37, 1000, 333, 77, (1 / np.sqrt(1000), 1 / np.sqrt(333)), seed)


BUILDERS = {"transformer_block": bench_transformer_block, "odd_mlp": odd_mlp}


def names() -> list[str]:
    return list(BUILDERS)


def model(name: str, seed: int = 0) -> onnx.ModelProto:
    """The named built model (see BUILDERS)."""
    if name not in BUILDERS:
        raise KeyError(f"no built model {name!r}; known: {', '.join(BUILDERS)}")
    return BUILDERS[name](seed)
