"""Export the model families users bring, as PyTorch's two ONNX exporters write them, into small
bundled fixtures (tunesearch/examples/<family>_<exporter>.onnx, manifest in exports.json).

    pip install torch torchvision transformers onnxscript   # only this script needs them
    python scripts/export_models.py                         # every family, both exporters
    python scripts/export_models.py --models bert gpt2 --exporters dynamo
    python scripts/export_models.py --large --folder /tmp/large   # benchmark sizes
    python scripts/export_models.py --large --vocab 30522 --models bert --folder /tmp/vocab

Each model is built from a small config with seeded random weights (nothing is downloaded), so a
fixture is 0.3-1.2 MB and the tests run it against onnxruntime without PyTorch. The manifest
records the exporter, opset, torch and transformers versions, the inputs and the dynamic axes.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "tunesearch" / "examples"
MANIFEST_NAME = "exports.json"
EXPORTERS = {"torchscript": 17, "dynamo": 18}   # the opset each exporter writes by default


@dataclass(frozen=True)
class Size:
    hidden: int
    layers: int
    heads: int
    ffn: int
    sequence: int
    vocab: int
    image: int


# the fixtures: small enough to commit and to compile in the test suite
SMALL = Size(hidden=64, layers=2, heads=4, ffn=128, sequence=16, vocab=256, image=32)
# --large: the sizes users run (BERT-mini-like), for benchmarks; not committed
LARGE = Size(hidden=256, layers=4, heads=4, ffn=1024, sequence=128, vocab=1024, image=224)
SIZE = SMALL


def first_output(model, key, names: list[str]):
    """The model as a module whose forward takes the inputs by position and returns one tensor
    (the hidden states or logits, by key), so the export has one output."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(**dict(zip(names, args)))
            return out if isinstance(out, torch.Tensor) else out[key]
    return Wrapped().eval()


def _ids(batch: int, length: int, vocab: int, seed: int):
    import torch
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=gen, dtype=torch.int64)


def _mask(batch: int, length: int):
    """An attention mask whose last quarter is padding: the mask arithmetic must be right."""
    import torch
    mask = torch.ones(batch, length, dtype=torch.int64)
    mask[:, length - length // 4:] = 0
    return mask


def bert():
    from transformers import BertConfig, BertModel
    z = SIZE
    config = BertConfig(vocab_size=z.vocab, hidden_size=z.hidden, num_hidden_layers=z.layers,
                        num_attention_heads=z.heads, intermediate_size=z.ffn,
                        max_position_embeddings=4 * z.sequence, attn_implementation="eager")
    inputs = {"input_ids": _ids(1, z.sequence, z.vocab, 1), "attention_mask": _mask(1, z.sequence)}
    return BertModel(config), "last_hidden_state", inputs, \
        {"input_ids": {1: "sequence"}, "attention_mask": {1: "sequence"}}


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    z = SIZE
    config = GPT2Config(vocab_size=z.vocab, n_embd=z.hidden, n_layer=z.layers, n_head=z.heads,
                        n_positions=4 * z.sequence,
                        use_cache=False, bos_token_id=0, eos_token_id=0,
                        attn_implementation="eager")
    length = max(z.sequence // 2, 8)
    return GPT2LMHeadModel(config), "logits", {"input_ids": _ids(1, length, z.vocab, 2)}, \
        {"input_ids": {1: "sequence"}}


def gpt2_static():
    """GPT-2 with every dimension fixed at export: the mask and positions fold at import."""
    model, key, inputs, _ = gpt2()
    return model, key, inputs, {}


def t5():
    from transformers import T5Config, T5Model
    z = SIZE
    config = T5Config(vocab_size=z.vocab, d_model=z.hidden, d_kv=z.hidden // z.heads,
                      d_ff=z.ffn, num_layers=z.layers, num_heads=z.heads, use_cache=False,
                      attn_implementation="eager")
    inputs = {"input_ids": _ids(1, z.sequence, z.vocab, 3),
              "decoder_input_ids": _ids(1, z.sequence // 2, z.vocab, 4)}
    return T5Model(config), "last_hidden_state", inputs, {}


def vit():
    from transformers import ViTConfig, ViTModel
    z = SIZE
    config = ViTConfig(image_size=z.image, patch_size=z.image // 4 if z is SMALL else 16,
                       hidden_size=z.hidden, num_hidden_layers=z.layers,
                       num_attention_heads=z.heads, intermediate_size=z.ffn,
                       attn_implementation="eager")
    return ViTModel(config), "last_hidden_state", {"pixel_values": _image(1, 3, z.image, 5)}, {}


def whisper():
    from transformers import WhisperConfig, WhisperModel
    z = SIZE
    config = WhisperConfig(vocab_size=z.vocab, d_model=z.hidden, encoder_layers=z.layers,
                           decoder_layers=z.layers, encoder_attention_heads=z.heads,
                           decoder_attention_heads=z.heads, encoder_ffn_dim=z.ffn,
                           decoder_ffn_dim=z.ffn, num_mel_bins=z.sequence,
                           max_source_positions=2 * z.sequence,
                           max_target_positions=2 * z.sequence, use_cache=False,
                           pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           decoder_start_token_id=1, attn_implementation="eager")
    inputs = {"input_features": _features(1, z.sequence, 4 * z.sequence, 6),
              "decoder_input_ids": _ids(1, z.sequence // 2, z.vocab, 7)}
    return WhisperModel(config), "last_hidden_state", inputs, {}


def mobilenet_v3():
    import torchvision
    small = SIZE is SMALL
    model = torchvision.models.mobilenet_v3_small(num_classes=10 if small else 1000,
                                                  width_mult=0.25 if small else 1.0).eval()
    return model, None, {"x": _image(1, 3, 64 if small else 224, 8)}, {}


def efficientnet():
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf
    small = SIZE is SMALL
    setting, last = _efficientnet_conf("efficientnet_b0", width_mult=0.25 if small else 1.0,
                                       depth_mult=0.34 if small else 1.0)
    model = EfficientNet(setting, dropout=0.2, last_channel=last,
                         num_classes=10 if small else 1000).eval()
    return model, None, {"x": _image(1, 3, 64 if small else 224, 9)}, {}


def _image(batch: int, channels: int, size: int, seed: int):
    import torch
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, channels, size, size, generator=gen)


def _features(batch: int, bins: int, frames: int, seed: int):
    import torch
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, bins, frames, generator=gen)


FAMILIES = {"bert": bert, "gpt2": gpt2, "gpt2_static": gpt2_static, "t5": t5, "vit": vit,
            "whisper": whisper, "mobilenet_v3": mobilenet_v3, "efficientnet": efficientnet}


def _randomize(model, seed: int) -> None:
    """Seeded weights everywhere, normalization statistics included (a fresh BatchNorm's are
    0 and 1, which would hide a wrong index)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
            if not tensor.is_floating_point():
                continue
            if name.endswith("running_var"):
                tensor.copy_(torch.rand(tensor.shape, generator=gen) + 0.5)
            elif name.endswith("running_mean"):
                tensor.copy_(torch.randn(tensor.shape, generator=gen) * 0.1)
            elif tensor.ndim > 1:
                tensor.copy_(torch.randn(tensor.shape, generator=gen) * 0.1)


def export(family: str, exporter: str, folder: Path) -> dict:
    import torch
    torch.manual_seed(0)
    model, key, inputs, dynamic = FAMILIES[family]()
    _randomize(model, 0)
    names = list(inputs)
    model = first_output(model.eval(), key, names)
    file = folder / f"{family}_{exporter}.onnx"
    args = tuple(inputs.values())
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            axes = {name: dict(dims) for name, dims in dynamic.items()}
            torch.onnx.export(model, args, str(file), input_names=names, output_names=["output"],
                              dynamic_axes=axes or None, opset_version=EXPORTERS[exporter],
                              dynamo=False)
        else:
            shapes = None
            if dynamic:
                dim = torch.export.Dim("sequence", min=2, max=4 * SIZE.sequence)
                shapes = {name: {axis: dim for axis in dims} for name, dims in dynamic.items()}
                shapes = (tuple(shapes.get(name) for name in names),)  # forward(*args)
            program = torch.onnx.export(model, args, input_names=names, output_names=["output"],
                                        dynamic_shapes=shapes, opset_version=EXPORTERS[exporter],
                                        dynamo=True, external_data=False)
            program.optimize()
            program.save(str(file), external_data=False)
    import onnx
    proto = onnx.load(str(file))
    ops = sorted({n.op_type for n in proto.graph.node})
    import transformers
    return {"file": file.name, "family": family, "exporter": exporter,
            "opset": next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "inputs": {n: list(v.shape) for n, v in inputs.items()},
            "dynamic_axes": {n: {str(k): v for k, v in d.items()} for n, d in dynamic.items()},
            "operators": ops, "bytes": file.stat().st_size}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--exporters", nargs="*", default=list(EXPORTERS),
                        choices=list(EXPORTERS))
    parser.add_argument("--folder", type=Path, default=EXAMPLES)
    parser.add_argument("--large", action="store_true",
                        help="the sizes users run (hidden 256, 4 layers, sequence 128; the "
                             "full MobileNetV3-small and EfficientNet-B0 at 224x224), for "
                             "benchmarks: give --folder outside the package")
    parser.add_argument("--vocab", type=int, default=None, metavar="WORDS",
                        help="the text models' vocabulary (the configs' own: BERT 30522, GPT-2 "
                             "50257, T5 32128) in place of the size's (256 small, 1024 large)")
    args = parser.parse_args()
    global SIZE
    SIZE = LARGE if args.large else SMALL
    if args.vocab is not None:
        if args.vocab < 2:
            parser.error("--vocab must be at least 2")
        if args.folder == EXAMPLES:
            parser.error("--vocab writes models other than the bundled ones: give --folder")
        SIZE = dataclasses.replace(SIZE, vocab=args.vocab)
    if args.large and args.folder == EXAMPLES:
        parser.error("--large writes models too big to bundle: give --folder")
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        print(f"error: {exc.name} is not installed; this script needs torch, torchvision, "
              "transformers and onnxscript", file=sys.stderr)
        return 2
    args.folder.mkdir(parents=True, exist_ok=True)
    manifest_file = args.folder / MANIFEST_NAME
    manifest = json.loads(manifest_file.read_text()) if manifest_file.is_file() else {}
    for family in args.models:
        for exporter in args.exporters:
            try:
                entry = export(family, exporter, args.folder)
            except Exception as exc:  # one exporter failing on one model is recorded, not fatal
                lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
                line = (lines[-1] if lines else type(exc).__name__)[:300]
                print(f"{family} {exporter}: export failed: {line}")
                manifest[f"{family}_{exporter}"] = {"family": family, "exporter": exporter,
                                                    "failed": line}
                stale = args.folder / f"{family}_{exporter}.onnx"
                if stale.exists():
                    stale.unlink()
                continue
            manifest[f"{family}_{exporter}"] = entry
            print(f"{family} {exporter}: {entry['bytes'] // 1024} KB, opset {entry['opset']}, "
                  f"{', '.join(entry['operators'])}")
    manifest_file.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
