"""Intervals for every figure of an evaluation, and paired comparisons of configurations on the same samples.

Each figure is {"value", "ci95", "n"} (a bootstrap percentile interval over samples: images for mAP, rows of
the batch axis otherwise; with "groups" when samples come in groups of dependent ones, crops of one photo, and
the groups were resampled). Configurations are compared on the task's primary metric: McNemar's test for top-1
agreement (its clustered form with groups), a paired bootstrap of the difference otherwise (the same resamples
for both configurations).
"""
from __future__ import annotations

import itertools

import numpy as np

from calib.evaluate import uncertainty as u

ALPHA = 0.05
LABELS = {
    "agreement_top1": "top-1 agreement with FP32",
    "agreement_top5": "top-5 agreement with FP32",
    "top1": "top-1 accuracy vs labels",
    "top5": "top-5 accuracy vs labels",
    "map50_95_vs_fp32": "mAP50:95 vs FP32",
    "map50_vs_fp32": "mAP50 vs FP32",
    "map50_95_labels": "mAP50:95 vs labels",
    "map50_labels": "mAP50 vs labels",
    "recall_vs_fp32": "box recall vs FP32 (IoU 0.5)",
    "recall_labels": "box recall vs labels (IoU 0.5)",
    "min_output_sqnr_db": "lowest output SQNR (dB)",
    "mean_cosine": "mean cosine to FP32 (per sample)",
    "min_cosine": "lowest cosine to FP32 (one sample)",
    "exact_match_vs_fp32": "exact match with FP32's text",
    "cer_vs_fp32": "character error rate vs FP32's text (lower is better)",
}


def label(key: str) -> str:
    """A column heading for a metric key."""
    if key in LABELS:
        return LABELS[key]
    for suffix, text in (("_sqnr_db", "SQNR (dB)"), ("_cosine", "cosine")):
        if key.endswith(suffix):
            return f"{key[:-len(suffix)]} {text} vs FP32"
    return key


def primary_metric(task: str, outputs) -> str:
    if task == "classification":
        return "agreement_top1"
    if task == "detection":
        return "map50_95_vs_fp32"
    if task == "embedding":
        return "mean_cosine"
    if task == "text":
        return "exact_match_vs_fp32"
    outputs = list(outputs)
    return f"{outputs[0]}_sqnr_db" if len(outputs) == 1 else "min_output_sqnr_db"


def _extra(groups) -> dict:
    gc = u.group_codes(groups)
    return {"groups": gc[1]} if gc else {}


def _mean(x: np.ndarray, seed: int, groups=None):
    x = np.asarray(x, np.float64)
    reps = u.replicates(u.mean_metric(x), x.size, seed=seed, groups=groups)
    return u.figure(x.mean() if x.size else None, reps, x.size, **_extra(groups)), reps


def mean_figure(x, groups=None) -> dict:
    return _mean(x, u.SEED, groups)[0]


def mean_figure_reps(x, groups=None) -> tuple[dict, np.ndarray]:
    return _mean(x, u.SEED, groups)


def drop_figure(task: str, figs: dict, reps: dict, fp32: dict, fp32_reps: dict) -> dict | None:
    """The accuracy drop with its interval, as calib.evaluate.report.drop defines it: FP32's score against the
    labels minus this configuration's (a paired difference: the same resamples), else 1 - the agreement with
    FP32 (top-1 agreement, mAP50:95 against FP32's boxes)."""
    pairs = {"classification": ("top1", "agreement_top1"), "detection": ("map50_95_labels", "map50_95_vs_fp32"),
             "text": (None, "exact_match_vs_fp32")}
    if task not in pairs:
        return None
    labelled, vs_fp32 = pairs[task]
    if labelled in figs and labelled in fp32 and labelled in fp32_reps:
        a, b = fp32[labelled], figs[labelled]
        if a["value"] is None or b["value"] is None:
            return None
        with np.errstate(invalid="ignore"):
            r = np.asarray(fp32_reps[labelled]) - np.asarray(reps[labelled])
        return u.figure(a["value"] - b["value"], r, b["n"], **{k: b[k] for k in ("groups", "boxes") if k in b},
                        of=f"FP32 {labelled} - INT8 {labelled}")
    if vs_fp32 in figs and figs[vs_fp32]["value"] is not None:
        f = figs[vs_fp32]
        return u.figure(1.0 - f["value"], 1.0 - np.asarray(reps[vs_fp32]), f["n"],
                        **{k: f[k] for k in ("groups", "boxes") if k in f}, of=f"1 - {vs_fp32}")
    return None


def method(task: str, groups=None) -> dict:
    """How the intervals were made, for the report (with groups: how many, and that they were resampled)."""
    out = {"resamples": u.RESAMPLES, "seed": u.SEED, "level": u.LEVEL, "interval": "percentile",
           "unit": "image" if task == "detection" else "sample", "alpha": ALPHA}
    gc = u.group_codes(groups)
    if gc is not None:
        out.update(resampled="groups", groups=gc[1], samples=len(gc[0]))
    return out


def classification_figures(cls, seed: int = u.SEED, groups=None, labelled_groups=None) -> tuple[dict, dict]:
    """`groups`: one per sample; `labelled_groups`: one per labelled sample (top-1 against labels)."""
    figs, reps = {}, {}
    for key, name in (("agreement_top1", "agree1"), ("agreement_top5", "agree5"), ("top1", "test1")):
        x = cls.samples(name)
        if x.size:
            figs[key], reps[key] = _mean(x, seed, labelled_groups if name == "test1" else groups)
    return figs, reps


def sample_cosines(comparison) -> np.ndarray:
    """Cosine of each sample's (only) output vector with FP32's: the embedding task's per-sample figure."""
    s = next(iter(comparison.rows.values())).sums()
    den = np.sqrt(s[:, 0] * s[:, 3])
    return np.where(den > 0, s[:, 2] / np.where(den > 0, den, 1.0), np.where(s[:, 1] == 0, 1.0, 0.0))


def embedding_figures(comparison, seed: int = u.SEED, groups=None) -> tuple[dict, dict]:
    x = sample_cosines(comparison)
    figs, reps = {}, {}
    if x.size:
        figs["mean_cosine"], reps["mean_cosine"] = _mean(x, seed, groups if groups is not None and
                                                         len(groups) == x.size else None)
    return figs, reps


def output_figures(comparison, seed: int = u.SEED, lowest: bool = True, groups=None) -> tuple[dict, dict]:
    """SQNR and cosine of each output against FP32; with `lowest`, also the lowest SQNR of several outputs."""
    figs, reps, sq = {}, {}, []
    for o, rows in comparison.rows.items():
        s = rows.sums()
        n = s.shape[0]
        f_sqnr = u.sqnr_metric(s[:, 0], s[:, 1])
        f_cos = u.cosine_metric(s[:, 2], s[:, 0], s[:, 3])
        g = groups if groups is not None and len(groups) == n else None
        reps[f"{o}_sqnr_db"] = u.replicates(f_sqnr, n, seed=seed, groups=g)
        reps[f"{o}_cosine"] = u.replicates(f_cos, n, seed=seed, groups=g)
        ones = np.ones((1, n))
        figs[f"{o}_sqnr_db"] = u.figure(f_sqnr(ones)[0], reps[f"{o}_sqnr_db"], n, **_extra(g))
        figs[f"{o}_cosine"] = u.figure(f_cos(ones)[0], reps[f"{o}_cosine"], n, **_extra(g))
        sq.append((f_sqnr(ones)[0], reps[f"{o}_sqnr_db"], n))
    if lowest and len(sq) > 1 and len({n for _, _, n in sq}) == 1:
        reps["min_output_sqnr_db"] = np.min(np.stack([r for _, r, _ in sq]), 0)
        figs["min_output_sqnr_db"] = u.figure(min(v for v, _, _ in sq), reps["min_output_sqnr_db"], sq[0][2],
                                              **_extra(groups if groups is not None and len(groups) == sq[0][2]
                                                       else None))
    return figs, reps


def detection_figures(result: dict, matches: dict, n_images: int, seed: int = u.SEED,
                      groups=None) -> tuple[dict, dict]:
    """mAP vs FP32's boxes (and vs the dataset's boxes) with images resampled and matches re-accumulated."""
    figs, reps = {}, {}
    for ref, suffix in (("vs_fp32", "vs_fp32"), ("vs_labels", "labels")):
        if ref not in result:
            continue
        point, m = result[ref], matches.get(ref)
        boxes = point.get("gt_boxes", 0)
        if m is None:  # no boxes, or no detections (mAP 0 whatever the resample)
            r50 = r = np.full(u.RESAMPLES, np.nan if not boxes else 0.0)
        else:
            both = u.replicates(lambda w: np.stack(m.map(w), 1).reshape(-1), n_images, seed=seed, groups=groups)
            r50, r = both[0::2], both[1::2]
        reps[f"map50_95_{suffix}"], reps[f"map50_{suffix}"] = r, r50
        figs[f"map50_95_{suffix}"] = u.figure(point.get("map50_95"), r, n_images, boxes=boxes, **_extra(groups))
        figs[f"map50_{suffix}"] = u.figure(point.get("map50"), r50, n_images, boxes=boxes, **_extra(groups))
    return figs, reps


def paired(names, figures: dict, reps: dict, key: str, cls: dict | None = None, groups=None) -> list[dict]:
    """Every pair of configurations compared on `key`: paired bootstrap of the difference (a - b); for top-1
    agreement, McNemar's test decides (its p-value < 0.05; the clustered test where samples carry groups)."""
    out = []
    for a, b in itertools.combinations(names, 2):
        if key not in reps.get(a, {}) or key not in reps.get(b, {}):
            continue
        fa, fb = figures[a][key], figures[b][key]
        c = u.paired_difference(reps[a][key], reps[b][key], fa["value"], fb["value"], fa["n"])
        c.update(a=a, b=b, metric=key)
        if key == "agreement_top1" and cls is not None:
            mc = u.mcnemar_clustered(cls[a].samples("agree1"), cls[b].samples("agree1"), groups)
            c.update(p_value=mc["p_value"], method=mc["method"], a_only=mc["a_only"], b_only=mc["b_only"],
                     significant=mc["p_value"] < ALPHA)
        out.append(c)
    return out
