"""Intervals and paired tests on cases with known answers; mAP re-accumulated under bootstrap weights."""
import math

import numpy as np
import pytest

from calib.evaluate import uncertainty as u
from calib.evaluate.ap import Matches
from calib.evaluate.decision import decide
from calib.evaluate.metrics import OutputRows, TensorStats, coco_map_matches


def _exact_two_sided(k, n):
    """Independent: twice the smaller binomial tail with math.comb, capped at 1."""
    k = min(k, n - k)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def _paired_table(both, a_only, b_only, neither):
    a = [1] * both + [1] * a_only + [0] * b_only + [0] * neither
    b = [1] * both + [0] * a_only + [1] * b_only + [0] * neither
    return np.array(a, bool), np.array(b, bool)


@pytest.mark.parametrize("a_only,b_only,p", [(1, 9, 22 / 1024), (0, 6, 2 / 64), (5, 5, 1.0), (3, 12, None)])
def test_mcnemar_exact_matches_binomial(a_only, b_only, p):
    a, b = _paired_table(40, a_only, b_only, 7)
    r = u.mcnemar(a, b)
    assert (r["a_only"], r["b_only"]) == (a_only, b_only) and r["method"] == "McNemar exact binomial"
    expected = _exact_two_sided(a_only, a_only + b_only)
    assert r["p_value"] == pytest.approx(expected, rel=1e-12)
    if p is not None:
        assert r["p_value"] == pytest.approx(p, rel=1e-12)


def test_mcnemar_large_counts_use_the_chi_square():
    a, b = _paired_table(10, 560, 490, 10)
    r = u.mcnemar(a, b)
    assert r["method"].startswith("McNemar chi-square")
    chi2 = (abs(560 - 490) - 1) ** 2 / 1050
    assert r["p_value"] == pytest.approx(math.erfc(math.sqrt(chi2 / 2)), rel=1e-12)
    assert r["p_value"] == pytest.approx(_exact_two_sided(490, 1050), rel=0.05)  # close to the exact value


def test_bootstrap_interval_of_a_mean_covers_the_analytic_one():
    x = np.random.default_rng(7).normal(3.0, 2.0, 5000)
    f = u.mean_interval(x)
    half = 1.959964 * x.std(ddof=1) / math.sqrt(x.size)
    assert f["n"] == 5000 and f["value"] == pytest.approx(x.mean())
    lo, hi = f["ci95"]
    assert lo == pytest.approx(x.mean() - half, abs=0.1 * half) and hi == pytest.approx(x.mean() + half, abs=0.1 * half)


def test_bootstrap_of_a_proportion_matches_the_normal_approximation():
    x = np.r_[np.ones(700), np.zeros(300)]
    lo, hi = u.mean_interval(x)["ci95"]
    half = 1.959964 * math.sqrt(0.7 * 0.3 / 1000)
    assert lo == pytest.approx(0.7 - half, abs=0.006) and hi == pytest.approx(0.7 + half, abs=0.006)


def test_replicates_are_deterministic_and_shared():
    x = np.arange(50.0)
    a = u.replicates(u.mean_metric(x), 50)
    assert np.array_equal(a, u.replicates(u.mean_metric(x), 50))
    assert not np.array_equal(a, u.replicates(u.mean_metric(x), 50, seed=1))
    w = np.concatenate(list(u.weight_chunks(50)))
    assert w.shape == (u.RESAMPLES, 50) and np.all(w.sum(1) == 50)


def test_identical_configurations_are_not_significantly_different():
    a = np.random.default_rng(0).random(200) < 0.8
    reps = u.replicates(u.mean_metric(a), a.size)
    c = u.paired_difference(reps, reps, a.mean(), a.mean(), a.size)
    assert c["diff"] == 0 and c["ci95"] == [0.0, 0.0] and not c["significant"] and c["p_value"] == 1.0
    assert u.mcnemar(a, a)["p_value"] == 1.0


def test_a_clear_difference_is_detected_and_a_small_one_is_not():
    a, b = _paired_table(60, 35, 0, 5)  # a right on 95 samples, b on 60 of them
    ra, rb = (u.replicates(u.mean_metric(v), v.size) for v in (a, b))
    c = u.paired_difference(ra, rb, a.mean(), b.mean(), a.size)
    assert c["significant"] and c["ci95"][0] > 0.2 and u.mcnemar(a, b)["p_value"] < 1e-9
    a, b = _paired_table(90, 2, 1, 7)  # one sample apart
    ra, rb = (u.replicates(u.mean_metric(v), v.size) for v in (a, b))
    assert not u.paired_difference(ra, rb, a.mean(), b.mean(), a.size)["significant"]
    assert u.mcnemar(a, b)["p_value"] == pytest.approx(1.0)


def test_sqnr_and_cosine_replicates_match_the_streaming_sums():
    rng = np.random.default_rng(3)
    ref = rng.normal(0, 1, (12, 7, 5)).astype(np.float32)
    test = ref + rng.normal(0, 0.05, ref.shape).astype(np.float32)
    rows, whole = OutputRows(), TensorStats()
    for lo in (0, 5):
        hi = 12 if lo else 5
        rows.update(ref[lo:hi], test[lo:hi])
        whole.update(ref[lo:hi], test[lo:hi])
    s = rows.sums()
    assert s.shape == (12, 4)
    ones = np.ones((1, 12))
    assert u.sqnr_metric(s[:, 0], s[:, 1])(ones)[0] == pytest.approx(whole.result()["sqnr_db"], rel=1e-9)
    assert u.cosine_metric(s[:, 2], s[:, 0], s[:, 3])(ones)[0] == pytest.approx(whole.result()["cosine"], rel=1e-9)
    twice = u.sqnr_metric(s[:, 0], s[:, 1])(np.full((1, 12), 2.0))[0]  # every sample drawn twice: same ratio
    assert twice == pytest.approx(whole.result()["sqnr_db"], rel=1e-9)


def _random_detections(rng, n):
    images, gt, dets = [(i + 1, 200, 200) for i in range(n)], [], []
    for i in range(1, n + 1):
        for _ in range(rng.integers(0, 5)):
            x, y = rng.uniform(0, 150, 2)
            w, h = rng.uniform(5, 50, 2)
            c = int(rng.integers(0, 4))
            gt.append((i, [x, y, w, h], c))
            if rng.random() < 0.8:
                dets.append((i, [x + rng.normal(0, 3), y + rng.normal(0, 3), w, h], float(np.round(rng.random(), 2)),
                             c if rng.random() < 0.9 else 5))
        for _ in range(rng.integers(0, 3)):
            dets.append((i, list(rng.uniform(0, 150, 4)), float(rng.random()), int(rng.integers(0, 4))))
    return images, gt, dets


@pytest.mark.parametrize("seed", range(6))
def test_weighted_map_equals_pycocotools_on_duplicated_images(seed):
    """Weights 1 give pycocotools' own mAP; integer weights give pycocotools on the images repeated that often
    (ties in score included: scores are rounded to two decimals)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 30))
    images, gt, dets = _random_detections(rng, n)
    point, m = coco_map_matches(images, gt, dets)
    assert isinstance(m, Matches)
    m50, m5095 = m.map(np.ones((1, n)))
    assert m50[0] == pytest.approx(point["map50"], abs=1e-12)
    assert m5095[0] == pytest.approx(point["map50_95"], abs=1e-12)
    w = rng.integers(0, 3, n)
    w[0] = max(w[0], 1)
    images2, gt2, dets2, nid = [], [], [], 1
    for i in range(n):
        for _ in range(w[i]):
            images2.append((nid, 200, 200))
            gt2 += [(nid, b, c) for j, b, c in gt if j == i + 1]
            dets2 += [(nid, b, s, c) for j, b, s, c in dets if j == i + 1]
            nid += 1
    if gt2:
        dup, _ = coco_map_matches(images2, gt2, dets2)
        w50, w5095 = m.map(w[None].astype(float))
        assert w50[0] == pytest.approx(dup["map50"], abs=1e-12)
        assert w5095[0] == pytest.approx(dup["map50_95"], abs=1e-12)


def _evaluation(n, a_right, b_right, task="classification", boxes=None):
    ra, rb = (u.replicates(u.mean_metric(v), v.size) for v in (a_right, b_right))
    figs = {k: {"agreement_top1": u.figure(v.mean(), r, n)} for k, v, r in (("a", a_right, ra), ("b", b_right, rb))}
    pair = u.paired_difference(ra, rb, a_right.mean(), b_right.mean(), n)
    mc = u.mcnemar(a_right, b_right)
    pair.update(a="a", b="b", metric="agreement_top1", p_value=mc["p_value"], method=mc["method"],
                significant=mc["p_value"] < 0.05, a_only=mc["a_only"], b_only=mc["b_only"])
    return {"task": task, "samples": n, "fp32_boxes": boxes, "primary_metric": "agreement_top1", "paired": [pair],
            "configs": {k: {"intervals": f, "layers": [], "outputs": {}} for k, f in figs.items()}}


def test_decision_names_a_best_only_beyond_noise():
    a, b = _paired_table(60, 35, 0, 5)
    d = decide(_evaluation(100, b, a), ["a", "b"])  # b is the better one
    assert d["status"] == "best" and d["best"] == d["ship"] == "b" and d["runner_up"] == "a"
    assert d["comparison"]["diff"] == pytest.approx(0.35) and d["comparison"]["a_only"] == 35
    a, b = _paired_table(90, 2, 1, 7)
    d = decide(_evaluation(100, a, b), ["a", "b"])
    assert d["status"] == "tie" and d["best"] is None and d["ship"] == "a"
    assert d["reason"].startswith("no significant difference between a and b")


def test_decision_warns_when_the_evaluation_is_too_small():
    a, b = _paired_table(5, 12, 0, 3)  # a clear difference, but 20 samples
    d = decide(_evaluation(20, a, b), ["a", "b"])
    assert d["status"] == "too_small" and d["best"] is None and d["ship"] == "a"
    assert "only 20 evaluation samples" in d["warnings"][0]
    a, b = _paired_table(60, 35, 0, 5)
    d = decide(_evaluation(100, a, b, task="detection", boxes=13), ["a", "b"])
    assert d["status"] == "too_small" and "only 13 FP32 boxes" in d["reason"]


def test_decision_warns_when_the_samples_come_from_few_photos():
    a, b = _paired_table(60, 35, 0, 5)  # a clear difference over 100 samples...
    ev = _evaluation(100, b, a)
    ev["bootstrap"] = {"resampled": "groups", "groups": 6, "samples": 100}  # ...but crops of 6 photos
    d = decide(ev, ["a", "b"])
    assert d["status"] == "too_small" and d["best"] is None and d["ship"] == "b"
    assert "only 6 independent source photos" in d["warnings"][0]
    ev["bootstrap"]["groups"] = 18  # the default recipe's evaluation: 18 photos and their crops
    assert decide(ev, ["a", "b"])["status"] == "best"
