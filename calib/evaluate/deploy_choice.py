"""The FP16+INT8 model in a report: its section, and whether the report's own evaluation found the FP16+INT8 model significantly worse than the Q/DQ model as written
(the same INT8 layers, float layers FP32): then the Deploy section says so and builds that one strongly typed.

The two rows (`<algo> qdq`, `<algo> qdq-fp16`: calib.evaluate.fp16_rows) run on the same samples, so their paired
comparison on the primary metric (calib.evaluate.confidence.paired) tells whether FP16 in the float layers costs
the task beyond noise: an audio front end whose `log(x + 1e-10)` reads 0 in FP16 scores 0.000 against 0.917.
"""
from __future__ import annotations

from dataclasses import dataclass

from calib.evaluate.confidence import label
from calib.evaluate.decision import oriented


@dataclass(frozen=True)
class Fp16Worse:
    fp16_row: str  # `<algo> qdq-fp16`
    better: str  # `<algo> qdq`: the Q/DQ model as written
    text: str  # the figures behind it, for a comment line

    def comment(self) -> str:
        return (f"# not the FP16+INT8 model: this evaluation found it significantly worse than the Q/DQ model as "
                f"written ({self.text}); build the Q/DQ model, float layers FP32")


def _rows(report: dict, ship: str) -> list[str] | None:
    given = report.get("fp16")
    for f in given if isinstance(given, list) else [given] if given else []:
        rows = f.get("rows") or []
        if f.get("algorithm") == ship and len(rows) == 2:
            return rows
    return None


def _num(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def fp16_worse(report: dict, ship: str) -> Fp16Worse | None:
    """The comparison of the ship's FP16+INT8 row with its Q/DQ row when the first is significantly worse."""
    rows = _rows(report, ship)
    s = report.get("summary") or {}
    key = s.get("metric")
    if rows is None or not key:
        return None
    qdq, fp16 = rows
    c = oriented(s.get("paired") or [], fp16, qdq)
    if c is None or not c.get("significant") or c.get("diff") is None or not c["diff"] < 0:
        return None
    values = {r: ((s.get("intervals") or {}).get(r, {}).get(key) or {}).get("value") for r in rows}
    ci = c.get("ci95")
    text = (f"{label(key)} {_num(values[fp16])} against {_num(values[qdq])}, difference {c['diff']:+.3f}"
            + (f", 95 % CI {ci[0]:+.3f} to {ci[1]:+.3f}" if ci else "")
            + (f", {c['method']} p = {c['p_value']:.3g}" if c.get("p_value") is not None else "")
            + f", {c['n']} samples")
    return Fp16Worse(fp16, qdq, text)


def fp16_blocks(report: dict) -> list[tuple]:
    """The FP16+INT8 model (strongly typed builds): its file, its rows and the layers it keeps in FP32."""
    given = report.get("fp16")
    if not given:
        return []
    out = [("h2", "Strongly typed model (FP16+INT8)")]
    for f in given if isinstance(given, list) else [given]:
        rows = f.get("rows") or []
        what = f"`{f['file']}`" if f.get("file") else f"The FP16+INT8 model of `{f['algorithm']}`"
        text = (f"{what}: the {f['algorithm']} scales with the float layers in FP16 and the INT8 layers as in the "
                f"Q/DQ model, for a strongly typed build (TensorRT 10 with --stronglyTyped, TensorRT 11); model "
                f"inputs and outputs {f['io_type']}; {f['casts']} casts between FP16 and FP32. ")
        if rows:
            text += (f"Rows `{rows[0]}` (the Q/DQ model as written, FP32 float layers) and `{rows[1]}` (this model, "
                     "FP16 rounding emulated on the CPU) above run calib's Q/DQ placement on the same samples. ")
        else:
            text += "Not simulated (ONNX Runtime cannot run this model's plugin nodes). "
        worse = fp16_worse(report, f["algorithm"]) if rows else None
        if worse:
            text += (f"This evaluation found it significantly worse than the Q/DQ model as written ({worse.text}): "
                     "the Deploy section builds the Q/DQ model strongly typed instead (float layers FP32). ")
        table = f.get("fp32_layers") or []
        text += (f"{len(table)} layers stay FP32 (the range rule read the ranges of {f.get('ranges_from')}):"
                 if table else "Every float layer is FP16.")
        out.append(("p", text))
        if table:
            out.append(("table", ["layer", "op", "rule", "why FP32"],
                        [[f"`{r['node']}`", r["op"], r["rule"], r["reason"]] for r in table]))
    return out
