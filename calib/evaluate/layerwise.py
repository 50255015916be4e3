"""Run the FP32 reference and each INT8 simulation side by side, batch by batch, and compare them."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import onnx

from calib.deploy.simulate import simulated_model
from calib.evaluate.metrics import OutputRows, TensorStats
from calib.io.memory import release
from calib.quantize.model import ModelInfo, initializers_not_inputs
from calib.quantize.opset import at_qdq_opset
from calib.quantize.qdq import Exclusions, count_qdq
from calib.runners.feed import fed
from calib.runners.onnxruntime import OrtRunner

log = logging.getLogger(__name__)


@dataclass
class Comparison:
    """Per-tensor statistics of one INT8 configuration against FP32."""

    name: str
    tensors: dict = field(default_factory=dict)  # tensor -> TensorStats
    outputs: tuple = ()  # the model's outputs: also compared sample by sample (intervals over samples)
    rows: dict = field(default_factory=dict)  # output -> OutputRows

    def update(self, ref: dict, test: dict) -> None:
        for k, v in test.items():
            if k in ref and isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.shape == ref[k].shape:
                self.tensors.setdefault(k, TensorStats()).update(ref[k], v, per_row=True)
                if k in self.outputs:
                    self.rows.setdefault(k, OutputRows()).update(ref[k], v)

    def layers(self, info: ModelInfo, samples: int | None = None, groups=None) -> list[dict]:
        """Per-tensor figures; with `samples` (the evaluation's count), the SQNR and cosine carry 95 % bootstrap
        intervals over samples (over `groups` of them where given) when the tensor has one row per sample."""
        out = []
        for t in info.activations:
            if t in self.tensors:
                row = {"tensor": t, "op_type": info.op_types.get(t, "?"), **self.tensors[t].result()}
                s = self.tensors[t].row_sums()
                if samples and s.shape[0] == samples:
                    row.update(_layer_intervals(s, groups))
                out.append(row)
        return out


def _layer_intervals(s: np.ndarray, groups) -> dict:
    from calib.evaluate import uncertainty as u

    n = s.shape[0]
    f_sqnr, f_cos = u.sqnr_metric(s[:, 0], s[:, 1]), u.cosine_metric(s[:, 2], s[:, 0], s[:, 3])
    both = u.replicates(lambda w: np.stack([f_sqnr(w), f_cos(w)], 1).reshape(-1), n, groups=groups)
    sq, cos = u.percentile_interval(both[0::2]), u.percentile_interval(both[1::2])
    gc = u.group_codes(groups)
    return {"sqnr_ci95": list(sq) if sq else None, "cosine_ci95": list(cos) if cos else None, "n": n,
            **({"groups": gc[1]} if gc else {})}


class Simulator:
    """The FP32 model and one Q/DQ model per configuration, all exposing the same tensors (a configuration with a
    precision model, calib.deploy.precision, is simulated as that engine runs it: calib.deploy.simulate).

    Memory stays bounded: the sessions share one ONNX Runtime arena (they run one at a time), and `compare` runs
    the exposed models `micro_batch` samples at a time, one configuration after the other, folding each one's
    tensors into its Comparison before the next runs; only the graph outputs are kept for the task metrics. With
    `groups` (the exposed tensors in groups, calib.runners.budget.evaluation_plan), each group has its own sessions
    and a run returns that group only: the model runs once per group, in the memory of the largest."""

    def __init__(self, model_path, info: ModelInfo, configs: dict, exclude: dict | None = None,
                 layerwise: bool = True, micro_batch: int = 2, precision: dict | None = None,
                 fixed: int | None = None, groups: list | None = None):
        """fixed: the model's fixed batch: every run holds exactly that many samples (batches come in multiples
        of it, calib.data.rebatch)."""
        self.info = info
        self.fixed = fixed
        self.micro_batch = fixed or max(1, micro_batch)
        proto = initializers_not_inputs(onnx.load(str(model_path)))
        expose = list(info.activations) if layerwise else []
        self.outputs = list(info.outputs)
        parts = [list(g) for g in groups] if layerwise and groups and len(groups) > 1 else [expose]
        arena = len(parts) == 1  # groups return tensors of other sizes in turn: freed to the heap, not kept
        self.ref = [fed(OrtRunner(proto, expose=g, spin=False, lean=True, label=str(model_path), arena=arena),
                        info.layout) for g in parts]
        release()  # each session's set-up copies (model bytes, parsed graph) back before the next one
        self.tests = {}
        exclude, precision = exclude or {}, precision or {}
        qproto = at_qdq_opset(proto, str(model_path)) if configs else proto  # below opset 13: converted once
        for name, amax in configs.items():
            q = simulated_model(qproto, amax, precision.get(name), exclude.get(name, Exclusions()))
            log.info("%s: INT8 simulation with %d Q/DQ pairs", name, count_qdq(q))
            self.tests[name] = [fed(OrtRunner(q, expose=g, spin=False, lean=True, arena=arena,
                                              label=f"{model_path} ({name})"), info.layout) for g in parts]
            del q
            release()
        del proto, qproto
        release()
        self.groups = []
        for g, runner in zip(parts, self.ref):
            avail = set(runner.tensor_names())
            self.groups.append([n for n in dict.fromkeys(self.outputs + g) if n in avail])
        self.names = list(dict.fromkeys(n for g in self.groups for n in g))

    def run(self, batch: dict) -> tuple[dict, dict]:
        """Every exposed tensor of FP32 and of each configuration on `batch`, all at once (small batches only:
        `compare` is the bounded way)."""
        ref = {k: v for g, r in zip(self.groups, self.ref) for k, v in r.run(batch, g).items()}
        return ref, {name: {k: v for g, r in zip(self.groups, rs) for k, v in r.run(batch, g).items()}
                     for name, rs in self.tests.items()}

    def compare(self, batch: dict, comps: dict, keep_reference: bool = False,
                keep_outputs: bool = True) -> tuple[dict, dict]:
        """Fold `batch` into `comps` (name -> Comparison); returns the graph outputs of FP32 and of each
        configuration on the whole batch (with keep_reference, FP32's every exposed tensor as well; without
        keep_outputs, nothing: the comparisons are all that is needed, and nothing of a run outlives it)."""
        n = int(next(iter(batch.values())).shape[0])
        step = n if keep_reference and not self.fixed else self.micro_batch
        ref_parts, test_parts = [], {name: [] for name in self.tests}
        for lo in range(0, n, step):
            part = {k: v[lo:lo + step] for k, v in batch.items()}
            whole = {}
            for gi, names in enumerate(self.groups):
                ref = self.ref[gi].run(part, names)
                for name, runners in self.tests.items():
                    test = runners[gi].run(part, names)
                    comps[name].update({k: v for k, v in ref.items() if gi == 0 or k not in self.outputs}, test)
                    if keep_outputs and gi == 0:
                        test_parts[name].append({o: test[o] for o in self.outputs if o in test})
                    del test
                if keep_reference:
                    whole.update(ref)
                elif keep_outputs and gi == 0:
                    whole = {o: ref[o] for o in self.outputs if o in ref}
                del ref
                if len(self.groups) > 1:
                    release()  # this group's tensors back to the system before the next group's runs
            if keep_outputs or keep_reference:
                ref_parts.append(whole)
        if not ref_parts:
            return {}, {name: {} for name in self.tests}
        return _joined(ref_parts), {name: _joined(p) if p else {} for name, p in test_parts.items()}


def _joined(parts: list[dict]) -> dict:
    if len(parts) == 1:
        return parts[0]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
