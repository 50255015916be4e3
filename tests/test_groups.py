"""Crops of one photo are not independent: the bootstrap resamples photos (groups), with known answers."""
import json
import math

import numpy as np
import pytest
from PIL import Image

from calib.data.groups import group_of, read_sources
from calib.data.images import folder_samples
from calib.errors import DataError
from calib.evaluate import uncertainty as u
from conftest import ROOT


def _dedup_and_dup(k=5, n=40, seed=3):
    x = np.random.default_rng(seed).normal(0.0, 1.0, n)
    return x, np.repeat(x, k), np.repeat(np.arange(n), k)


def test_cluster_interval_of_duplicates_equals_the_deduplicated_interval():
    x, xd, groups = _dedup_and_dup()
    plain = u.mean_interval(x)  # 40 independent samples
    cluster = u.mean_interval(xd, groups=groups)  # 200 samples, 5 copies of each: 40 groups
    naive = u.mean_interval(xd)  # the copies taken as independent
    assert cluster["ci95"] == pytest.approx(plain["ci95"], rel=1e-12)  # the same draws, up to rounding
    assert cluster["value"] == pytest.approx(plain["value"])
    assert cluster["n"] == 200 and cluster["groups"] == 40 and "groups" not in naive
    width = lambda f: f["ci95"][1] - f["ci95"][0]  # noqa: E731
    assert width(naive) == pytest.approx(width(plain) / math.sqrt(5), rel=0.15)  # the naive one shrinks by sqrt(k)


def test_groups_of_one_sample_are_the_plain_bootstrap():
    x = np.arange(30.0)
    assert u.group_codes(list(range(30))) is None
    assert np.array_equal(u.replicates(u.mean_metric(x), 30, groups=[f"g{i}" for i in range(30)]),
                          u.replicates(u.mean_metric(x), 30))
    with pytest.raises(ValueError):
        u.replicates(u.mean_metric(x), 30, groups=[0, 0, 1])


def test_cluster_weights_give_each_sample_its_groups_count():
    groups = ["a", "a", "b", "c", "c", "c"]
    w = np.concatenate(list(u.weight_chunks(6, 200, groups=groups)))
    assert np.array_equal(w[:, 0], w[:, 1]) and np.array_equal(w[:, 3], w[:, 5])
    assert np.all(w[:, 0] + w[:, 2] + w[:, 3] == 3)  # three groups drawn per resample


def test_clustered_mcnemar_known_answer():
    # group 0: a right and b wrong on 3 samples, both right on 1 (d = 3); group 1: one a-only, one neither (d = 1);
    # group 2: one b-only, one both (d = -1). X = (3 + 1 - 1)^2 / (9 + 1 + 1) = 9 / 11
    a = np.array([1, 1, 1, 1, 1, 0, 0, 1], bool)
    b = np.array([0, 0, 0, 1, 0, 0, 1, 1], bool)
    g = [0, 0, 0, 0, 1, 1, 2, 2]
    r = u.mcnemar_clustered(a, b, g)
    assert (r["a_only"], r["b_only"]) == (4, 1) and "clustered" in r["method"]
    assert r["p_value"] == pytest.approx(math.erfc(math.sqrt(9 / 11 / 2)), rel=1e-12)


def test_clustered_mcnemar_on_duplicates_is_the_plain_statistic_of_the_deduplicated_set():
    rng = np.random.default_rng(5)
    a, b = rng.random(60) < 0.75, rng.random(60) < 0.6
    k = 4
    n01, n10 = int((a & ~b).sum()), int((~a & b).sum())
    plain = math.erfc(math.sqrt((n01 - n10) ** 2 / (n01 + n10) / 2))  # uncorrected McNemar of the 60 samples
    dup = u.mcnemar_clustered(np.repeat(a, k), np.repeat(b, k), np.repeat(np.arange(60), k))
    assert dup["p_value"] == pytest.approx(plain, rel=1e-12)
    naive = u.mcnemar(np.repeat(a, k), np.repeat(b, k))  # 4x the discordant pairs: far too sure
    assert naive["p_value"] < dup["p_value"] / 10


def test_folder_sidecar_puts_crops_and_their_original_in_one_group(tmp_path):
    (tmp_path / "photos").mkdir()
    (tmp_path / "crops").mkdir()
    for name, folder in (("cat.jpg", "photos"), ("dog.jpg", "photos"), ("000_cat.jpg", "crops"),
                         ("001_cat.jpg", "crops"), ("002_dog.jpg", "crops"), ("003_x.jpg", "crops")):
        Image.new("RGB", (8, 8)).save(tmp_path / folder / name)
    (tmp_path / "crops" / "sources.json").write_text(json.dumps(
        {"000_cat.jpg": "../photos/cat.jpg", "001_cat.jpg": "../photos/cat.jpg", "002_dog.jpg": "../photos/dog.jpg"}))
    crops, _ = folder_samples(tmp_path / "crops")
    photos, _ = folder_samples(tmp_path / "photos")
    groups = [group_of(s, i) for i, s in enumerate(crops + photos)]
    assert len(crops) == 4  # the sidecar is not an image
    assert groups[0] == groups[1] == groups[4] and groups[2] == groups[5] and len(set(groups)) == 3
    assert groups[3] not in groups[:3] + groups[4:]  # not in the sidecar: its own group
    (tmp_path / "crops" / "sources.json").write_text("[1, 2]")
    with pytest.raises(DataError, match="sources.json"):
        folder_samples(tmp_path / "crops")


def test_shipped_crops_name_their_originals():
    src = read_sources(ROOT / "datasets" / "photos_crops")
    crops, _ = folder_samples(ROOT / "datasets" / "photos_crops")
    photos, _ = folder_samples(ROOT / "datasets" / "photos")
    assert len(src) == len(crops) == 192
    originals = {group_of(s, i) for i, s in enumerate(photos)}
    assert {group_of(s, i) for i, s in enumerate(crops)} == originals  # every crop's group is one of the 18 photos
    assert len(originals) == 18


def _folder(root, images, sources=None):
    root.mkdir()
    for name, a in images.items():
        Image.fromarray(a).save(root / name)
    if sources:
        (root / "sources.json").write_text(json.dumps(sources))
    return root


def test_evaluation_of_duplicated_photos_equals_the_deduplicated_one(tmp_path, tiny_model):
    """Each photo three times under one group: every interval (outputs and per layer) is that of the photos once."""
    from calib.data.sources import make_source
    from calib.evaluate.api import evaluate
    from calib.quantize.model import inspect_model
    from calib.recipe import DataSpec, PreprocessSpec

    rng = np.random.default_rng(0)
    photos = {f"p{i}.png": rng.integers(0, 255, (8, 8, 3), dtype=np.uint8) for i in range(12)}
    once = _folder(tmp_path / "once", photos)
    dup = _folder(tmp_path / "dup", {f"{k}_{n}": a for n, a in photos.items() for k in range(3)},
                  {f"{k}_{n}": f"../once/{n}" for n in photos for k in range(3)})
    info = inspect_model(tiny_model)
    amax = {t: 2.0 for t in info.activations}
    res = {}
    for name, folder in (("once", once), ("dup", dup)):
        src = make_source(DataSpec(kind="folder", path=str(folder)), PreprocessSpec(resize=(8, 8)), "input", 4)
        res[name] = evaluate(tiny_model, {"int8": amax}, src, task="outputs")
    a, b = res["once"]["configs"]["int8"], res["dup"]["configs"]["int8"]
    assert res["dup"]["samples"] == 36 and res["dup"]["bootstrap"]["groups"] == 12
    assert "groups" not in res["once"]["bootstrap"]
    fa, fb = a["intervals"]["logits_sqnr_db"], b["intervals"]["logits_sqnr_db"]
    assert fb["n"] == 36 and fb["groups"] == 12 and fb["ci95"] == pytest.approx(fa["ci95"], rel=1e-9)
    la, lb = ({l["tensor"]: l for l in c["layers"]} for c in (a, b))
    assert la.keys() == lb.keys() and len(la) > 3
    for t in la:
        assert la[t]["n"] == 12 and lb[t]["n"] == 36 and lb[t]["groups"] == 12
        if la[t]["sqnr_ci95"] and np.isfinite(la[t]["sqnr_ci95"]).all():
            assert lb[t]["sqnr_ci95"] == pytest.approx(la[t]["sqnr_ci95"], rel=1e-9)
