"""Which configuration to ship, and how sure: a best one is named only when it beats the runner-up beyond noise.

The leader is the configuration with the highest point estimate of the task's primary metric. It is named best
when its paired comparison with the runner-up is significant (McNemar p < 0.05 for top-1 agreement, a paired
bootstrap interval of the difference that excludes 0 otherwise) and the evaluation is large enough; otherwise
the decision says there is no significant difference, or that the evaluation is too small to decide. Either
way `ship` names the leader: a cache has to be chosen, and it is the one with the best point estimate.
"""
from __future__ import annotations

import math

from calib.evaluate.confidence import label

MIN_SAMPLES = 30  # images (or samples) below which no comparison is trusted
MIN_BOXES = 50  # FP32 boxes below which a detection comparison is not trusted
MIN_GROUPS = 10  # independent groups (source photos of crops) below which a cluster bootstrap is not trusted


def oriented(paired: list[dict], a: str, b: str) -> dict | None:
    """The comparison of a with b, as a - b."""
    for c in paired:
        if (c["a"], c["b"]) == (a, b):
            return dict(c)
        if (c["a"], c["b"]) == (b, a):
            d = dict(c, a=a, b=b)
            d["diff"] = None if c["diff"] is None else -c["diff"]
            d["ci95"] = None if c["ci95"] is None else [-c["ci95"][1], -c["ci95"][0]]
            if "a_only" in c:
                d["a_only"], d["b_only"] = c["b_only"], c["a_only"]
            return d
    return None


def _value(evaluation: dict, name: str, key: str) -> float:
    v = ((evaluation["configs"][name].get("intervals") or {}).get(key) or {}).get("value")
    return -math.inf if v is None or (isinstance(v, float) and math.isnan(v)) else v


def _rank_key(evaluation: dict, name: str, key: str) -> tuple:
    """Highest primary metric first; equal ones by their lowest output SQNR."""
    figs = evaluation["configs"][name].get("intervals") or {}
    sq = [_value(evaluation, name, k) for k in figs if k.endswith("_sqnr_db")]
    return -_value(evaluation, name, key), -(min(sq) if sq else -math.inf)


def size_warnings(evaluation: dict) -> list[str]:
    out = []
    n = evaluation.get("samples", 0)
    unit = "images" if evaluation.get("task") == "detection" else "samples"
    if n < MIN_SAMPLES:
        out.append(f"only {n} evaluation {unit} (fewer than {MIN_SAMPLES}), too few to tell configurations apart")
    groups = (evaluation.get("bootstrap") or {}).get("groups")
    if groups is not None and groups < MIN_GROUPS:
        out.append(f"the {n} evaluation {unit} come from only {groups} independent source photos (fewer than "
                   f"{MIN_GROUPS}), too few to tell configurations apart")
    boxes = evaluation.get("fp32_boxes")
    if evaluation.get("task") == "detection" and boxes is not None and boxes < MIN_BOXES:
        out.append(f"only {boxes} FP32 boxes (fewer than {MIN_BOXES}), too few for mAP against them to decide")
    return out


def _fmt(v: float | None, key: str = "") -> str:
    if v is None:
        return "-"
    s = f"{v:+.1f}" if key.endswith("_db") else f"{v:+.3f}"
    return s[1:] if float(s) == 0 else s  # a difference that rounds to zero carries no sign


def decide(evaluation: dict, candidates: list[str], fallback_score=None) -> dict:
    """The decision among `candidates` (names of evaluation['configs']), with its reason."""
    key = evaluation.get("primary_metric")
    paired = evaluation.get("paired")
    if key is None or paired is None:  # an evaluation made without intervals
        ship = max(candidates, key=lambda n: fallback_score(evaluation["configs"][n]))
        return {"status": "no_intervals", "best": None, "ship": ship, "metric": key,
                "reason": "the evaluation carries no intervals: the choice is the highest point estimate",
                "warnings": []}
    order = sorted(candidates, key=lambda n: _rank_key(evaluation, n, key))
    ship = order[0]
    warnings = size_warnings(evaluation)
    if len(order) == 1:
        return {"status": "only_one", "best": ship, "ship": ship, "metric": key, "tied": [ship],
                "reason": f"{ship} is the only configuration", "warnings": warnings}
    runner = order[1]
    comp = oriented(paired, ship, runner)
    tied = [n for n in order[1:] if not (oriented(paired, ship, n) or {}).get("significant")]
    what = label(key)
    how = f"{what}: no paired comparison with {runner}"
    if comp is not None:
        ci = comp.get("ci95")
        unit = "images" if evaluation["task"] == "detection" else "samples"
        how = (f"{what} {_fmt(comp['diff'], key)} over {runner} (95 % CI {_fmt(ci[0], key) if ci else '-'} to "
               f"{_fmt(ci[1], key) if ci else '-'}, {comp['n']} {unit}"
               + (f"; {comp['method']} p = {comp['p_value']:.3g}" if "McNemar" in comp["method"] else "")
               + ")")
    d = {"metric": key, "ship": ship, "runner_up": runner, "comparison": comp, "tied": tied, "warnings": warnings}
    if warnings:
        return {**d, "status": "too_small", "best": None,
                "reason": f"the evaluation is too small to decide: {'; '.join(warnings)}. {ship} has the highest "
                          f"point estimate, {how}"}
    if comp is not None and comp.get("significant"):
        if key.endswith("_sqnr_db"):  # a proxy: closer outputs, not a better task (calib.evaluate.verdict)
            return {**d, "status": "best", "best": ship,
                    "reason": f"{ship}'s outputs are closer to FP32 than the runner-up's beyond noise, {how}; "
                              "output SQNR is a proxy that can disagree with the model's task"}
        return {**d, "status": "best", "best": ship,
                "reason": f"{ship} is better than the runner-up beyond noise, {how}"}
    return {**d, "status": "tie", "best": None,
            "reason": f"no significant difference between {ship} and {runner}: {how}"}
