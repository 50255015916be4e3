"""What `calib recover` must reach: `--target METRIC>=VALUE` on a figure named as in report.json (the `_vs_fp32`
suffix optional), or `--max-drop D` below FP32's own value of the figure.

A target is parsed before any work and checked against the figures the evaluation measures once the first one
is in: an unknown figure, one the evaluation cannot measure (no boxes, no labels) or one measured on too few
samples to tell is an error naming the option."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from calib.errors import CalibError

# other names users type for report.json's figures (the sensitivity search's names among them)
ALIASES = {"top1_agreement": "agreement_top1", "top5_agreement": "agreement_top5", "accuracy": "top1",
           "top1_accuracy": "top1", "top5_accuracy": "top5", "output_sqnr": "min_output_sqnr_db",
           "sqnr": "min_output_sqnr_db", "cosine": "mean_cosine", "exact_match": "exact_match_vs_fp32",
           "cer": "cer_vs_fp32", "recall": "recall_vs_fp32", "map": "map50_95_vs_fp32"}
LOWER_IS_BETTER = ("cer_vs_fp32",)
MIN_SAMPLES = 10  # fewer held-out samples than this cannot tell a recovery step from noise
_FORM = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.:-]*)\s*(>=|<=)\s*([-+0-9.eE]+|inf)\s*$")


@dataclass(frozen=True)
class Target:
    metric: str | None  # as the user typed it (None: the task's primary figure)
    op: str = ">="  # >= or <=
    value: float | None = None  # None: FP32's value minus max_drop
    max_drop: float | None = None

    def describe(self, key: str, threshold: float) -> str:
        if self.value is None:
            return f"{key} {self.op} {threshold:.4g} (FP32 {'-' if self.op == '>=' else '+'} {self.max_drop:g})"
        return f"{key} {self.op} {threshold:.4g}"


def parse_target(text: str | None, max_drop: float | None) -> Target:
    """`METRIC>=VALUE`, `METRIC<=VALUE` (an error rate), or `METRIC` alone with --max-drop; one of them given."""
    if max_drop is not None and (not math.isfinite(max_drop) or max_drop < 0):
        raise CalibError(f"--max-drop: {max_drop}: expected a number >= 0")
    if not text:
        if max_drop is None:
            raise CalibError("--target: give a target such as 'map50_95>=0.95', or --max-drop D (a drop from FP32)")
        return Target(None, ">=", None, max_drop)
    m = _FORM.match(text)
    if m is None:
        if max_drop is not None and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.:-]*", text.strip()):
            name = text.strip()
            return Target(name, "<=" if canonical(name) in LOWER_IS_BETTER else ">=", None, max_drop)
        raise CalibError(f"--target: '{text}': expected METRIC>=VALUE such as map50_95>=0.95 or "
                         "agreement_top1>=0.99 (or METRIC alone with --max-drop)")
    if max_drop is not None:
        raise CalibError(f"--max-drop: give it or a value in --target ('{text}'), not both")
    name, op, v = m.group(1), m.group(2), float(m.group(3))
    if not math.isfinite(v):
        raise CalibError(f"--target: '{text}': the value must be a finite number")
    want = "<=" if canonical(name) in LOWER_IS_BETTER else ">="
    if op != want:
        raise CalibError(f"--target: '{text}': {canonical(name)} is better {'lower' if want == '<=' else 'higher'}: "
                         f"write {name}{want}{m.group(3)}")
    return Target(name, op, v, None)


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def resolve(target: Target, points: dict, primary: str) -> str:
    """The report.json key `target` names among the figures measured (`points`: key -> value), or the task's
    `primary` figure where it names none."""
    name = target.metric or primary
    for key in (name, canonical(name), f"{name}_vs_fp32", f"{canonical(name)}_vs_fp32"):
        if key in points:
            return key
    known = sorted(k for k in points if not k.startswith("fp32"))
    raise CalibError(f"--target: unknown metric '{name}': this evaluation reports {', '.join(known)} (a detector's "
                     "mAP needs --task detection or --head, accuracy needs labelled data)")


def threshold(target: Target, key: str, points: dict, samples: int, fp32_boxes: int | None) -> float:
    """The value to reach on `key`, checked measurable: a value there, enough samples, boxes for box figures."""
    if samples < MIN_SAMPLES:
        raise CalibError(f"--target: {samples} evaluation samples cannot tell a recovery step from noise: give at "
                         f"least {MIN_SAMPLES} (more --data, or a smaller --calib-samples)")
    if (key.startswith(("map", "recall")) and key.endswith("vs_fp32")) and not fp32_boxes:
        raise CalibError(f"--target: {key} cannot be measured: FP32 finds no boxes on the evaluation images (lower "
                         "the confidence threshold in a recipe, or give images with objects)")
    got = points.get(key)
    if got is None or (isinstance(got, float) and math.isnan(got)):
        raise CalibError(f"--target: {key} cannot be measured on this evaluation (no value)")
    if target.value is not None:
        return target.value
    if key.endswith("_sqnr_db") or key.endswith("_cosine") and key != "mean_cosine":
        raise CalibError(f"--max-drop: FP32 has no value of {key} to drop from: give --target '{key}>=VALUE'")
    fp32 = points.get(f"fp32:{key}", 1.0)  # against FP32 itself: 1 (agreement, mAP, exact match, cosine)
    if key in LOWER_IS_BETTER:
        return 0.0 + target.max_drop
    if fp32 is None:
        raise CalibError(f"--max-drop: FP32's own {key} cannot be measured here")
    return fp32 - target.max_drop


def sign(key: str) -> float:
    return -1.0 if key in LOWER_IS_BETTER else 1.0
