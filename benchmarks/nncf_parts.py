"""NNCF's plain `nncf.quantize` on the model and data of one `calib recover` run, with one or more of its parts
switched off or changed, each quantized model scored with calib's own metric: which part of NNCF's scheme makes
its figure. Runs in NNCF's own Python, as benchmarks/nncf_control.py does, with the same scorer.

    NNCF_PYTHON benchmarks/nncf_parts.py --work WORK --scorer 'CALIB_PYTHON recover_scorer.py ...' \\
        --model-type TRANSFORMER base nosq global nobc sq0.5 ...

A variant is parts joined by '+': base (NNCF's defaults, the symmetric preset PERFORMANCE), nosq (no SmoothQuant),
sqA (SmoothQuant with alpha A for MatMul), global (activation ranges from the global min/max, not the mean of the
per-sample min/max), nobc (no bias correction), noof (no overflow fix). Each model is written to
WORK/nncf_VARIANT.onnx; one JSON line per variant on stdout.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from nncf_control import Scorer, items, session


def options(variant: str):
    from nncf.quantization.advanced_parameters import (AdvancedQuantizationParameters,
                                                       AdvancedSmoothQuantParameters, OverflowFix)
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    adv: dict = {}
    for part in variant.split("+"):
        if part == "base":
            continue
        if part == "nosq":
            adv["smooth_quant_alphas"] = AdvancedSmoothQuantParameters(matmul=-1)
        elif part.startswith("sq"):
            adv["smooth_quant_alphas"] = AdvancedSmoothQuantParameters(matmul=float(part[2:]))
        elif part == "global":
            adv["activations_range_estimator_params"] = RangeEstimatorParametersSet.MINMAX
        elif part == "nobc":
            adv["disable_bias_correction"] = True
        elif part == "noof":
            adv["overflow_fix"] = OverflowFix.DISABLE
        else:
            raise SystemExit(f"unknown part {part!r} in {variant!r}")
    return AdvancedQuantizationParameters(**adv)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--scorer", required=True)
    ap.add_argument("--model-type", choices=["TRANSFORMER"])
    ap.add_argument("variants", nargs="+")
    a = ap.parse_args()
    import nncf
    import onnx

    scorer = Scorer(a.scorer)
    model = onnx.load(str(a.work / "model.onnx"))
    cal, val = items(a.work / "calibration.npz"), items(a.work / "validation.npz")
    calibration = nncf.Dataset(cal, lambda item: item[1])
    kind = ({"model_type": nncf.ModelType[a.model_type]} if a.model_type else {})
    for v in a.variants:
        t = time.perf_counter()
        q = nncf.quantize(model, calibration, subset_size=len(cal), preset=nncf.QuantizationPreset.PERFORMANCE,
                          advanced_parameters=options(v), **kind)
        s = session(q)
        names = [o.name for o in s.get_outputs()]
        value = scorer.value({i: dict(zip(names, s.run(None, feeds))) for i, feeds in val})
        onnx.save(q, str(a.work / f"nncf_{v}.onnx"))
        print(json.dumps({"variant": v, "value": value, "seconds": round(time.perf_counter() - t, 1)}), flush=True)
    scorer.proc.stdin.close()


if __name__ == "__main__":
    main()
