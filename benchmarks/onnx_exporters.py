"""Can one ONNX graph, made by one exporter, serve `foxhunt export` and `Forecaster.update`'s live path?

    python benchmarks/onnx_exporters.py [--hidden 16] [--calls 500] [--only TEXT]

Today there are two: `foxhunt export` writes the training model behind dense per-window inputs
(export/graph.py `ExportedForward`) with `torch.onnx.export(dynamo=True)`; the live path exports the folded
inference model (model/inference/folded.py) on dense live windows (traced.py `_LiveArgs`) with `dynamo=False`, in
memory, on its first call: one graph at batch 1 and one with a dynamic batch axis. This script exports each
candidate on the bundled sample's model (untrained, seeded: latency and parity do not depend on the values) and
prints, per candidate: the export's seconds (what a first `update` waits, for a live candidate), the graph's nodes,
parity with the training model's PyTorch forward on real windows at batch 1 and 256 (export/parity.py's measure,
limit 1e-5) and onnxruntime's CPU ms per batch-1 call (p50 / p99, the live path's session options, one thread).
A candidate the exporter cannot take prints its error. The TorchScript exporter prints the whole graph on a failure:
read the table with `2>/dev/null | grep '^|'`.
"""

from __future__ import annotations

import argparse
import io
import logging
import re
import sys
import tempfile
import time
import warnings
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

sys.path.insert(0, str(Path(__file__).parent))
from latency import model_package  # noqa: E402

from foxhunt.data.config import DataConfig  # noqa: E402
from foxhunt.data.io.sample import bundled_sample_path  # noqa: E402
from foxhunt.data.prepare import prepare_data  # noqa: E402
from foxhunt.export.graph import ExportedForward, dense_inputs  # noqa: E402
from foxhunt.export.onnx import fixed_size_bags  # noqa: E402
from foxhunt.export.parity import relative_error  # noqa: E402
from foxhunt.model.inference.folded import InferenceTFT  # noqa: E402
from foxhunt.model.inference.traced import BatchForward, _LiveArgs  # noqa: E402
from foxhunt.model.saved import load_model  # noqa: E402


class DenseFolded(torch.nn.Module):
    """`foxhunt export`'s inputs (the present dense groups) with the folded model's live forward inside."""

    def __init__(self, folded: InferenceTFT, present: list[str]):
        super().__init__()
        self.folded, self.present = folded, present

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        x = dict(zip(self.present, inputs, strict=True))
        return self.folded.live(x["static_cat"][:, 0], x["encoder_cont"], x["decoder_cont"])  # (B, D, Q)


def export(module: torch.nn.Module, args: tuple, names: list[str], dynamo: bool, dynamic: bool) -> tuple[bytes, float]:
    start = time.perf_counter()
    with warnings.catch_warnings(), redirect_stdout(io.StringIO()), torch.no_grad(), torch.inference_mode(False):
        warnings.simplefilter("ignore")
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        if dynamo:  # as export/onnx.py calls it
            batch = torch.export.Dim("batch", min=1)
            program = torch.onnx.export(
                module, args, None, dynamo=True, input_names=names[:-1], output_names=names[-1:], optimize=False,
                dynamic_shapes=(tuple({0: batch} for _ in args),) if dynamic else None,
                custom_translation_table={torch.ops.aten.embedding_bag.padding_idx: fixed_size_bags})
            blob = program.model_proto.SerializeToString()
        else:  # as model/inference/traced.py calls it
            buf = io.BytesIO()
            torch.onnx.export(module, args, buf, dynamo=False, opset_version=17, input_names=names[:-1],
                              output_names=names[-1:], dynamic_axes={n: {0: "batch"} for n in names} if dynamic else None)
            blob = buf.getvalue()
    return blob, time.perf_counter() - start


def why(e: Exception) -> str:
    """The exporter's reason in one line: the failing node's source line and the "because" clause (the message
    holds the whole TorchScript graph besides)."""
    text = " ".join(str(e).split())
    where = re.search(r"# (\S+:\d+):\d+", text)
    because = re.search(r"because [^.]*", text)
    short = because.group(0) if because else text[:160]
    return f"{type(e).__name__} at {where.group(1).split('/src/')[-1] if where else '?'}: {short}"


def session(blob: bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()  # the live path's (traced.py OnnxForward)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(blob, options, providers=["CPUExecutionProvider"])


def cpu_ms(fn, n: int) -> tuple[float, float]:
    for _ in range(30):
        fn()
    ms = []
    for _ in range(n):
        c = time.process_time()
        fn()
        ms.append((time.process_time() - c) * 1e3)
    p50, p99 = np.percentile(ms, [50, 99])
    return float(p50), float(p99)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--calls", type=int, default=500, help="Timed batch-1 calls per graph.")
    ap.add_argument("--only", default=None, help="Run the candidates whose label contains this text.")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = DataConfig(paths=(str(bundled_sample_path()),))
    data = prepare_data(cfg)
    lm = load_model(model_package(data, cfg, args.hidden, Path(tempfile.mkdtemp())))
    model = lm.model.eval()
    ids = data.splits["train"][:256]
    one, many = data.windows.batch(ids[:1]), data.windows.batch(ids)
    with torch.inference_mode():
        want = {1: model(one).quantiles.numpy(), 256: model(many).quantiles.numpy()}
    dense = {1: dense_inputs(one), 256: dense_inputs(many)}
    folded = InferenceTFT(model)
    with torch.no_grad():
        folded(one)  # folds the positional inputs: dense_ready from here on
    live = {b: tuple(x for x in (dense[b]["static_cat"][:, 0].contiguous(), dense[b]["encoder_cont"],
                                 dense[b]["decoder_cont"])) for b in (1, 256)}
    live_module = _LiveArgs(folded, BatchForward(folded, cfg.encoder_length, cfg.horizon).batch(
        *(t.numpy() for t in live[1]))).eval()
    exported = ExportedForward(model, lm.schema).eval()
    present = exported.present
    groups = {b: tuple(dense[b][n] for n in present) for b in (1, 256)}
    live_names, dense_names = ["codes", "enc", "dec", "quantiles"], [*present, "quantiles"]
    candidates = {  # label: (module, live inputs?, dynamo, dynamic batch axis)
        "live graph, batch 1, dynamo=False (update today)": (live_module, True, False, False),
        "live graph, dynamic batch, dynamo=False (update of >1 series today)": (live_module, True, False, True),
        "training model, dense inputs, dynamo=True (foxhunt export today)": (exported, False, True, True),
        "training model, dense inputs, dynamo=False": (exported, False, False, True),
        "folded model, dense inputs, dynamo=True, dynamic batch": (DenseFolded(folded, present), False, True, True),
        "folded model, dense inputs, dynamo=True, batch 1": (DenseFolded(folded, present), False, True, False),
        "folded model, dense inputs, dynamo=False, dynamic batch": (DenseFolded(folded, present), False, False, True),
    }
    print(f"torch {torch.__version__}, onnxruntime {ort.__version__}, hidden {args.hidden}, inputs {present}")
    print("\n| candidate | export s | nodes | parity batch 1 / 256 | ORT batch 1 CPU p50 / p99 ms |")
    print("| --- | --- | --- | --- | --- |")
    for label, (module, is_live, dynamo, dynamic) in candidates.items():
        if args.only and args.only not in label:
            continue
        inputs, names = (live, live_names) if is_live else (groups, dense_names)
        example = tuple(t[:2] for t in inputs[256]) if dynamic else inputs[1]  # batch 2: no batch-1 shortcut
        try:
            blob, secs = export(module, example, names, dynamo, dynamic)
        except Exception as e:  # the exporter cannot take this module: say why
            print(f"| {label} | failed: {why(e)} | | | |", flush=True)
            continue
        s = session(blob)
        feeds = {b: {n: t.numpy() for n, t in zip(names, inputs[b], strict=False)} for b in (1, 256)}
        err1 = relative_error(s.run(None, feeds[1])[0], want[1])
        err256 = f"{relative_error(s.run(None, feeds[256])[0], want[256]):.1e}" if dynamic else "-"
        p50, p99 = cpu_ms(lambda s=s, f=feeds[1]: s.run(None, f), args.calls)
        print(f"| {label} | {secs:.2f} | {len(onnx.load_from_string(blob).graph.node)} | {err1:.1e} / {err256} | "
              f"{p50:.3f} / {p99:.3f} |", flush=True)


if __name__ == "__main__":
    main()
