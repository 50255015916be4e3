"""The absolute verdict beside the relative one: is the INT8 model to ship close to FP32 on the metric that decided?

The decision (calib.evaluate.decision) says which cache is best among those evaluated; this says whether the best
is good enough, against stated thresholds, and when it is not, the command to run next (the sensitivity search
that finds the fewest layers to keep in float, or the evaluation again with the worst layer kept in float). Where
no task metric decided (the outputs' SQNR / cosine), the report says that they are a proxy for the task.
"""
from __future__ import annotations

import shlex

from calib.evaluate.confidence import label

CLOSE = {"agreement_top1": 0.99, "map50_95_vs_fp32": 0.95, "mean_cosine": 0.99, "exact_match_vs_fp32": 0.99}
SQNR_CLOSE_DB = 20.0
THRESHOLDS_TEXT = ("top-1 agreement with FP32 >= 99 %, mAP50:95 vs FP32 >= 0.95, mean cosine >= 0.99, "
                   "exact match with FP32's text >= 0.99, "
                   f"output SQNR >= {SQNR_CLOSE_DB:g} dB")
WEIGHTED = ("Conv", "ConvTranspose", "Gemm", "MatMul")
PROXY = ("Output SQNR and cosine are a proxy: they measure how far the raw outputs move, not what the model's own "
         "decoding makes of them, and they can rank the caches differently from the task (on a detector, the cache "
         "with the higher output SQNR can find fewer of FP32's boxes). A difference in them says which outputs are "
         "closer to FP32, not which model does its task better. To rank on the task: --task classification or "
         "detection, --head NAME for a detector's outputs, or --postprocess FILE.py:FUNCTION (recipe keys "
         "evaluation.task, evaluation.detection.format, evaluation.postprocess).")


def is_proxy(metric: str | None) -> bool:
    """The metric is the outputs' SQNR / cosine, not a task's."""
    return bool(metric) and (metric.endswith("_sqnr_db") or metric.endswith("_cosine") and metric != "mean_cosine")


def threshold(metric: str | None) -> float | None:
    if metric is None:
        return None
    if metric.endswith("_sqnr_db"):
        return SQNR_CLOSE_DB
    return CLOSE.get(metric)


def _name(metric: str) -> str:
    return label(metric).replace(" (dB)", "")  # the value carries its unit


def _fmt(v: float, metric: str) -> str:
    if metric.endswith("_db"):
        return f"{v:.1f} dB"
    if metric == "agreement_top1":
        return f"{100 * v:.1f} %"
    return f"{v:.3f}"


def _sensitivity(recipe: str, ship: str, metric: str) -> str:
    budget = {"agreement_top1": ["sensitivity.metric=top1_agreement", "sensitivity.max_drop=0.01"],
              "map50_95_vs_fp32": ["sensitivity.metric=map50", "sensitivity.max_drop=0.05"]}.get(
        metric, ["sensitivity.metric=output_sqnr", f"sensitivity.min_sqnr_db={SQNR_CLOSE_DB:g}"])
    return " ".join(["calib", "sensitivity", shlex.quote(recipe), "--set", f"sensitivity.algorithm={ship}"]
                    + [a for s in budget for a in ("--set", s)])


def recover_step(base: str, metric: str, out: str) -> str:
    """`calib recover` with the user's own model, data and task options and the threshold calib calls close as its
    target."""
    thr = threshold(metric)
    goal = shlex.quote(f"{metric}>={thr:g}")
    return (f"`{base} --target {goal} --out {shlex.quote(out)}`: recovers INT8 accuracy until {_name(metric)} "
            f"reaches {_fmt(thr, metric)}, in INT8 first (equalization, bias correction, another algorithm per "
            "tensor), then with the fewest layers kept in float, and writes the cache, the layer precisions and the "
            "deploy commands")


def worst_weighted_layer(summary: dict, ship: str) -> dict | None:
    """The lowest-SQNR tensor of the configuration to ship made by a weighted layer (what --exclude keeps in
    float), else its lowest-SQNR tensor."""
    layers = summary.get("worst_layers", {}).get(ship) or []
    weighted = [l for l in layers if l.get("op_type") in WEIGHTED]
    return (weighted or layers or [None])[0]


def next_step(report: dict, summary: dict) -> str:
    """What to run when the model to ship is not close to FP32: the command, with the actual names."""
    d = summary["decision"]
    ship, metric = d["ship"], d["metric"]
    recipe = report.get("recipe_file")
    if recipe:
        return (recover_step(f"calib recover {shlex.quote(recipe)}", metric, "recover") + "; or "
                f"`{_sensitivity(recipe, ship, metric)}`: ranks the layers by their INT8 damage and finds the fewest "
                "to keep in FP16 until the threshold holds (layer_precisions.txt for the TensorRT builder, exclude.txt "
                "for `calib cache convert --exclude`).")
    out = []
    if report.get("recover") and threshold(metric) is not None:
        out.append(recover_step(report["recover"], metric, "recover")
                   + " (--data gives both the calibration samples and the held-out ones)")
    layer = worst_weighted_layer(summary, ship)
    rerun = report.get("rerun")
    if layer is not None and rerun:
        cache = shlex.quote(str(report.get("caches", {}).get(ship, ship + ".cache")))
        kept = "".join(f" --exclude {shlex.quote(p)}" for p in report.get("exclude") or ())
        out.append(f"`{rerun} --cache {cache}{kept} --exclude {shlex.quote(layer['tensor'])} --out "
                   f"{shlex.quote(ship + '-exclude')}`: "
                   f"the same evaluation with the worst layer ({layer['op_type']} `{layer['tensor']}`"
                   + (f", {layer['sqnr_db']:.1f} dB" if isinstance(layer.get("sqnr_db"), (int, float)) else "")
                   + ") kept in float; add more --exclude until it is close, then deploy with the commands that "
                   "report prints")
    out.append(f"with a recipe, `{_sensitivity('RECIPE', ship, metric)}` searches for the fewest layers to keep in "
               "FP16 (a recipe is a YAML file naming the model, the data and the preprocessing)")
    return "; or ".join(out) + "."


def verdict(report: dict) -> dict:
    """{"close": True | False | None, "metric", "value", "threshold", "text", "next" (a sentence, or None)}."""
    s = report["summary"]
    d = s["decision"]
    ship, metric = d["ship"], d.get("metric")
    fig = (s.get("intervals", {}).get(ship) or {}).get(metric) or {}
    value = fig.get("value", s["rows"].get(ship, {}).get(metric))
    thr = threshold(metric)
    out = {"close": None, "metric": metric, "value": value, "threshold": thr, "thresholds": THRESHOLDS_TEXT,
           "proxy": is_proxy(metric), "next": None}
    if value is None or thr is None or value != value:
        why = f"no threshold for {label(metric)}" if thr is None and metric else \
            f"no value of {label(metric) if metric else 'a metric'} for {ship}"
        out.update(value=None, text=f"calib cannot say whether {ship} is close to FP32: {why}.")
        return out
    close = value >= thr
    what = f"{_name(metric)} {_fmt(value, metric)} for {ship}"
    ci = fig.get("ci95")
    text = (f"**{'Close' if close else 'Not close'} to FP32**: {what}, "
            + (f"at or above the {_fmt(thr, metric)} calib calls close" if close
               else f"below the {_fmt(thr, metric)} calib calls close")
            + f" (thresholds: {THRESHOLDS_TEXT}).")
    if close and ci and ci[0] is not None and ci[0] < thr:
        text += f" Its 95 % interval reaches down to {_fmt(ci[0], metric)}, below the threshold."
    if out["proxy"]:
        text += " This is the outputs' distance to FP32, a proxy, not the task's accuracy."
    out.update(close=close, text=text, next=None if close else next_step(report, s))
    return out


def verdict_line(report: dict) -> str:
    """The verdict in one line, for the terminal."""
    v = report.get("verdict") or verdict(report)
    if v["close"] is None:
        return v["text"]
    head = "close to FP32" if v["close"] else "NOT close to FP32"
    m = v["metric"]
    # report.json writes an infinite SQNR (outputs identical to FP32) as null
    shown = _fmt(v["value"], m) if v["value"] is not None else ("inf" if v["close"] else "-inf")
    line = f"{head}: {_name(m)} {shown} (threshold {_fmt(v['threshold'], m)})"
    if v["proxy"]:
        line += ", output SQNR is a proxy for the task"
    if v["next"]:
        line += "; next: " + v["next"].split("`")[1]
    return line
