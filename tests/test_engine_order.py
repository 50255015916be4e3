"""The CPU report's choice against the order of the real INT8 engines (H200, TensorRT 8.6.0), on the recipes as
shipped: the records benchmarks/engine_order.py wrote, held against the engine numbers recorded beside them."""
import dataclasses
import importlib.util
import json

import pytest

from calib.data.sources import image_samples
from calib.recipe import load_recipe
from conftest import ROOT

_spec = importlib.util.spec_from_file_location("engine_order", ROOT / "benchmarks" / "engine_order.py")
eo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(eo)
RECORDS = sorted((ROOT / "benchmarks" / "engine-order").glob("*.json"))


def test_engine_scores_are_the_recorded_ones():
    e = eo.engine_scores()
    assert e["mobilenet_v2"]["scores"] == {"minmax": 0.5390625, "entropy": 0.65234375, "mse": 0.6640625,
                                           "percentile": 0.71484375}  # 138, 167, 170, 183 of 256 photos
    y = e["yolov3-tiny"]["scores"]
    assert sorted(y, key=y.get, reverse=True) == ["mse", "minmax", "percentile", "entropy"]
    assert y["mse"] == pytest.approx(0.9521, abs=1e-4) and y["minmax"] == pytest.approx(0.8133, abs=1e-4)


def _record(status, ship, tied=(), paired=()):
    return {"decision": {"status": status, "ship": ship, "tied": list(tied)}, "paired": list(paired)}


def test_check_known_answers():
    engine = {"scores": {"minmax": 0.5, "entropy": 0.6, "mse": 0.7, "percentile": 0.8}}
    assert eo.check(_record("best", "percentile"), engine)["ok"]
    assert not eo.check(_record("best", "mse"), engine)["ok"]  # named best beyond noise, engines disagree
    assert eo.check(_record("tie", "mse", ["percentile"]), engine)["ok"]  # no significant difference
    assert not eo.check(_record("tie", "mse", ["entropy"]), engine)["ok"]  # engines' best significantly worse
    wrong = {"a": "minmax", "b": "entropy", "diff": 0.1, "significant": True}
    assert not eo.check(_record("tie", "percentile", ["mse"], [wrong]), engine)["ok"]
    assert eo.check(_record("tie", "percentile", ["mse"], [dict(wrong, significant=False)]), engine)["ok"]


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_cpu_choice_agrees_with_the_engines(path):
    rec = json.loads(path.read_text())
    engines = eo.engine_scores()
    if path.stem not in engines:  # a zoo model with no engine numbers yet: its record waits for them
        assert rec["engines"] is None and rec["check"] is None
    else:
        assert rec["check"] == eo.check(rec, engines[path.stem])  # the record says what the check says today
        assert rec["check"]["ok"], rec["check"]["problems"]
    # made by the recipe as shipped: its evaluation data, every algorithm, the deployed build's simulation
    r = load_recipe(ROOT / "recipes" / rec["recipe"])
    spec = r.evaluation_data
    zoo = [p for p in spec.include if p.startswith("zoo:")]
    local = dataclasses.replace(spec, include=tuple(p for p in spec.include if p not in zoo), label_regex=None)
    expected = len(image_samples(local)) + 20 * len(zoo)  # the zoo's imagenet-samples: 20 photos, not fetched here
    assert zoo in ([], ["zoo:imagenet-samples"])
    assert rec["samples"] == expected and sorted(rec["figures"]) == sorted(eo.ALGOS)
    assert rec["precision_model"].startswith("implicit INT8") and rec["bootstrap"]["resampled"] == "groups"


def test_every_zoo_model_with_engine_numbers_has_a_record():
    assert {p.stem for p in RECORDS} >= set(eo.engine_scores())
