"""Scale-out (calib.scale, `--ray`): the statistics pass shared out among workers and the variants of a recovery
measured ahead on them give byte for byte what one process gives. Without Ray, calib.scale.pool.Serial deals the
work as a cluster would (its merging and ordering checked on every machine); with the [ray] extra, the same on a
local Ray cluster of two single-CPU nodes (skipped only where Ray is not installed; CI installs it and
CALIB_RAY_REQUIRED=1 makes a skip a failure)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from calib.calibrate import calibrate
from calib.cli.main import main
from calib.scale.pool import Serial
from calib.stats.histogram import HistogramCollector
from scale_graphs import outlier_chain, samples

TIMED = ("seconds", "command")  # wall time, and the command as typed (with --ray): all that may differ


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _untimed(x):
    if isinstance(x, dict):
        return {k: _untimed(v) for k, v in x.items() if k not in TIMED}
    if isinstance(x, list):
        return [_untimed(v) for v in x]
    return x


def _same_recovery(a, b):
    """Every file of two `calib recover` outputs identical, recover.json up to its wall times."""
    fa, fb = _files(a), _files(b)
    assert sorted(fa) == sorted(fb)
    ja = json.loads(fa.pop("recover.json").decode().replace(str(a), "OUT"))  # the output folder named in commands
    jb = json.loads(fb.pop("recover.json").decode().replace(str(b), "OUT"))
    assert _untimed(ja) == _untimed(jb)
    for name in ("recover.md", ".calib-manifest.json"):  # they carry the wall times too
        fa.pop(name, None), fb.pop(name, None)
    for name in fa:
        assert fa[name] == fb[name], name
    return ja


def test_collectors_merge_as_one_pass_over_every_batch():
    """Two collectors fed halves of the batches (the first batch's ranges told to both) merge into the one fed
    them all: counts, zeros, ranges, first-batch ranges and TensorRT's grids (which double as values grow)."""
    rng = np.random.default_rng(3)
    batches = [rng.normal(0, 1 + i, (4, 50)).astype(np.float32) for i in range(6)]
    batches[2][0, :7] = 0.0
    first = {"t": float(np.abs(batches[0]).max())}
    whole = HistogramCollector(256, trt_first=dict(first))
    parts = [HistogramCollector(256, trt_first=dict(first)), HistogramCollector(256, trt_first=dict(first),
                                                                                 first=False)]
    for i, b in enumerate(batches):
        whole.update("t", b)
        whole.first = False
        parts[0 if i == 0 else 1 + (i % 1)].update("t", b)
        parts[0].first = False
    got = parts[0].merge(parts[1]).histogram("t")
    want = whole.histogram("t")
    assert np.array_equal(got.counts, want.counts) and got.width == want.width
    assert (got.zeros, got.count, got.absmax, got.min, got.max) == (want.zeros, want.count, want.absmax, want.min,
                                                                    want.max)
    assert want.zeros >= 7 and (got.first_absmax, got.first_max) == (want.first_absmax, want.first_max)
    assert got.trt.width == want.trt.width and np.array_equal(got.trt.counts, want.trt.counts)
    assert want.trt.width > first["t"] / 2048  # the grid did double: the merge had to align two widths


def _calibrate(tmp_path, name, pool, **kw):
    model, data = outlier_chain(tmp_path / "m.onnx"), samples(tmp_path / "x.npy", 60)
    calibrate(model, str(data), out=tmp_path / name, batch_size=4, pool=pool, **kw)
    return _files(tmp_path / name)


@pytest.mark.parametrize("workers", [2, 3])
def test_statistics_pass_shared_out_writes_the_same_caches(tmp_path, workers):
    one = _calibrate(tmp_path, "one", None)
    shared = _calibrate(tmp_path, f"shared{workers}", Serial(workers))
    assert one == shared and "entropy.cache" in one  # entropy reads TensorRT's grid: the first batch's ranges


def _recover_api(tmp_path, name, pool, target="out_sqnr_db>=40"):
    """calib recover through its API, as the command line builds it, with a pool."""
    from calib.cli.data import DataArgs
    from calib.cli.recover import _from_flags
    from calib.cli.task import choose_task
    from calib.search.recover import recover
    from calib.search.recover_state import RecoverSpec
    from calib.search.target import parse_target

    model, data = outlier_chain(tmp_path / "m.onnx"), samples(tmp_path / "x.npy")
    chosen = choose_task("outputs", "auto", None, None, None)
    m, info, cal, ev, evaluation, memory = _from_flags(str(model), DataArgs(str(data)), 32, 8, chosen, (), (), (),
                                                       "2GB")
    spec = RecoverSpec(parse_target(target, None))
    recover(m, info, cal, ev, spec, evaluation, tmp_path / name, memory, 8, pool=pool)
    return tmp_path / name


def test_recovery_with_variants_measured_ahead_is_the_same(tmp_path):
    """Every step, the ranking, the per-tensor choice and the bisection: the same configuration, figures and
    variant counts whether variants are measured one at a time or ahead, several at once."""
    res = _same_recovery(_recover_api(tmp_path, "one", None), _recover_api(tmp_path, "ahead", Serial(3)))
    assert res["float_layers"] and res["met"] and res["variants_measured"] > 10  # the search did run


def test_ray_missing_is_one_line_naming_the_option(tmp_path):
    """Without Ray (hidden from a subprocess), --ray is one error line naming the option and the extra; exit 2;
    nothing written."""
    model, data = outlier_chain(tmp_path / "m.onnx"), samples(tmp_path / "x.npy")
    code = ("import sys; sys.modules['ray'] = None\nfrom calib.cli.main import main\n"
            f"main(['-q', 'calibrate', {str(model)!r}, '--data', {str(data)!r}, '--ray', 'auto', '-o', "
            f"{str(tmp_path / 'out')!r}])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --ray: Ray is not installed") and "[ray]" in lines[0]
    assert not (tmp_path / "out").exists()


# -- on a Ray cluster ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster: a head node and a worker node, one CPU each (two workers)."""
    if os.environ.get("CALIB_RAY_REQUIRED") == "1":
        import ray  # noqa: F401  (CI installs the [ray] extra: a missing Ray is a failure there)
    pytest.importorskip("ray", reason="the [ray] extra is not installed")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        cluster.shutdown()


def _cli(*args):
    r = CliRunner().invoke(main, ["-q", *map(str, args)])
    assert r.exit_code == 0, r.output
    return r


def test_ray_calibrate_writes_the_same_caches(tmp_path, ray_cluster):
    model, data = outlier_chain(tmp_path / "m.onnx"), samples(tmp_path / "x.npy", 60)
    _cli("calibrate", model, "--data", data, "--batch-size", 4, "-o", tmp_path / "one")
    _cli("calibrate", model, "--data", data, "--batch-size", 4, "-o", tmp_path / "ray", "--ray", ray_cluster)
    one, ray = _files(tmp_path / "one"), _files(tmp_path / "ray")
    assert one == ray and len(one) >= 8


def test_ray_recover_is_the_same(tmp_path, ray_cluster):
    model, data = outlier_chain(tmp_path / "m.onnx"), samples(tmp_path / "x.npy")
    args = ("recover", model, "--data", data, "--target", "out_sqnr_db>=40")
    _cli(*args, "-o", tmp_path / "one")
    _cli(*args, "-o", tmp_path / "ray", "--ray", ray_cluster)
    res = _same_recovery(tmp_path / "one", tmp_path / "ray")
    assert res["float_layers"] and res["met"]


def test_ray_sensitivity_is_the_same(tmp_path, ray_cluster):
    outlier_chain(tmp_path / "m.onnx")
    samples(tmp_path / "x.npy", 40)
    (tmp_path / "r.yaml").write_text("name: s\nmodel: m.onnx\ncalibration_data: {kind: npy, path: x.npy}\n"
                                     "sensitivity: {metric: output_sqnr, min_sqnr_db: 40, samples: 16, "
                                     "per_tensor: [percentile, mse]}\noutput: out\n")
    _cli("sensitivity", tmp_path / "r.yaml", "-o", tmp_path / "one")
    _cli("sensitivity", tmp_path / "r.yaml", "-o", tmp_path / "ray", "--ray", ray_cluster)
    a, b = _files(tmp_path / "one"), _files(tmp_path / "ray")
    for name in (".calib-manifest.json", "run.log"):  # their times
        a.pop(name, None), b.pop(name, None)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name
    assert json.loads(a["sensitivity.json"])["float_layers"]


def test_ray_unreachable_cluster_is_one_line(tmp_path):
    pytest.importorskip("ray", reason="the [ray] extra is not installed")
    model, data = outlier_chain(tmp_path / "m.onnx"), samples(tmp_path / "x.npy")
    r = CliRunner().invoke(main, ["-q", "calibrate", str(model), "--data", str(data), "-o", str(tmp_path / "out"),
                                  "--ray", "127.0.0.1:1"])
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines()[-1].startswith("error: --ray 127.0.0.1:1: no Ray cluster")
    assert not (tmp_path / "out").exists()
