"""The cache parser and the recipe loader on arbitrary input: a valid result or calib's own error, nothing else."""
import math
import struct

import numpy as np
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calib.errors import CacheError, CalibError
from calib.quantize.cache import LINE_BREAKS, format_cache, parse_cache
from calib.recipe import load_recipe

# tensor names a cache line can hold: no line break of any kind (U+2028 too: str.splitlines() breaks on it, and
# format_cache refuses such a name, tested below)
names = st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters=LINE_BREAKS), min_size=1,
                max_size=30).filter(lambda s: s.strip() == s and not s.endswith(":"))


@settings(max_examples=1500, deadline=None)
@given(st.text(max_size=400))
def test_cache_parser_never_crashes(text):
    try:
        c = parse_cache(text)
    except CalibError:
        return
    assert all(math.isfinite(v) and v >= 0 for v in c.scales.values())


@settings(max_examples=800, deadline=None)
@given(st.dictionaries(names, st.floats(min_value=0, max_value=1e30, allow_nan=False), min_size=1, max_size=20))
def test_cache_round_trip(amax):
    c = parse_cache(format_cache(amax))
    assert list(c.scales) == list(amax)
    for k, v in amax.items():
        # amax / 127 in float32 arithmetic, as TensorRT computes a scale: where the scale is an FP32 subnormal
        # (amax below about 1.5e-36) it differs from float64's v / 127 rounded once by a few units in the last place
        want = float(np.float32(v) / np.float32(127.0))
        assert c.scales[k] == want
        assert c.scales[k] == struct.unpack(">f", struct.pack(">f", v / 127.0))[0] or v < 1.5e-36 or \
            math.isclose(c.scales[k], v / 127, rel_tol=1e-6)


@settings(max_examples=200, deadline=None)
@given(names, st.sampled_from(LINE_BREAKS), names)
def test_a_name_with_a_line_break_is_refused(head, brk, tail):
    try:
        format_cache({head + brk + tail: 1.0})
    except CacheError as exc:
        assert f"U+{ord(brk):04X}" in str(exc)
    else:
        raise AssertionError(f"a tensor name holding U+{ord(brk):04X} was written into a cache")


values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
                      lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=12), ch, max_size=4),
                      max_leaves=20)
keys = st.sampled_from(["name", "model", "calibration_data", "preprocess", "calibration", "evaluation", "output",
                        "sensitivity", "evaluation_data", "calibraton", "kind", "path"])


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(keys, values, max_size=6) | values)
def test_recipe_loader_never_crashes(tmp_path, doc):
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(doc))
    try:
        load_recipe(p)
    except CalibError:
        pass


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_recipe_loader_on_raw_bytes(tmp_path, data):
    p = tmp_path / "r.yaml"
    p.write_bytes(data)
    try:
        load_recipe(p)
    except CalibError:
        pass
