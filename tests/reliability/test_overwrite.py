"""No command writes over one of its own inputs, by name, through a symbolic link or through a hard link; a cache
and its sidecar are written together or not at all."""
import hashlib
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from calib.cli import main
from reliability.test_bad_inputs import one_line_failure
from reliability.test_publish import calibrate, leftovers, snapshot, work  # noqa: F401  (work: a fixture)


def tree(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() or p.is_symlink()}


@pytest.fixture
def published(work):
    assert calibrate(work, 0, work / "out").exit_code == 0
    return work


def convert(work, *args):
    return CliRunner().invoke(main, ["cache", "convert", str(work / "out" / "entropy.cache"), "--model",
                                     str(work / "m.onnx"), *args])


@pytest.mark.parametrize("to", ["cache", "qdq"])
@pytest.mark.parametrize("target", ["out/entropy.cache", "m.onnx", "out/entropy.json", "link-to-cache",
                                    "hardlink-to-model", "link-to-sidecar"])
def test_cache_convert_never_writes_over_its_inputs(published, to, target):
    work = published
    os.symlink(work / "out" / "entropy.cache", work / "link-to-cache")
    os.symlink(work / "out" / "entropy.json", work / "link-to-sidecar")
    os.link(work / "m.onnx", work / "hardlink-to-model")
    before = tree(work)
    r = convert(work, "--to", to, "--carrier", "MinMaxCalibration", "-o", str(work / target))
    one_line_failure(r, target, "input")
    assert r.exit_code == 2
    assert tree(work) == before  # nothing written, no temporary or .calib-prev file left


def test_cache_convert_refuses_a_cache_that_would_be_its_own_sidecar(published):
    work = published
    before = tree(work)
    r = convert(work, "--to", "cache", "-o", str(work / "new.json"))
    one_line_failure(r, "new.json", "sidecar")
    assert r.exit_code == 2 and tree(work) == before


def test_cache_convert_does_not_replace_a_json_that_is_not_a_sidecar(published):
    """-o x.cache writes x.json too: a user's x.json that is no calib sidecar is not replaced."""
    work = published
    (work / "x.json").write_text('{"my": "settings"}\n')
    before = tree(work)
    r = convert(work, "--to", "cache", "-o", str(work / "x.cache"))
    one_line_failure(r, "x.json")
    assert r.exit_code == 2 and tree(work) == before


def test_cache_convert_to_a_new_path_writes_both(published):
    work = published
    r = convert(work, "--to", "cache", "--carrier", "MinMaxCalibration", "-o", str(work / "mm.cache"))
    assert r.exit_code == 0, r.output
    assert (work / "mm.cache").read_text().startswith("TRT-8600-MinMaxCalibration")
    assert CliRunner().invoke(main, ["cache", "inspect", str(work / "mm.cache")]).exit_code == 0
    r = convert(work, "--to", "cache", "--carrier", "EntropyCalibration2", "-o", str(work / "mm.cache"))
    assert r.exit_code == 0, r.output  # a pair calib wrote is replaced as a pair


def test_evaluate_into_the_folder_of_its_caches_keeps_them(published):
    """evaluate --cache out/x.cache --out out: the report joins the caches; they are inputs, never swapped away."""
    work = published
    out = work / "out"
    caches = {k: v for k, v in snapshot(out).items() if k != ".calib-manifest.json"}
    r = CliRunner().invoke(main, ["--quiet", "evaluate", str(work / "m.onnx"), "--cache", str(out / "entropy.cache"),
                                  "--cache", str(out / "minmax.cache"), "--data", str(work / "x1.npy"),
                                  "--no-layerwise", "--out", str(out)])
    assert r.exit_code == 0, r.output
    after = snapshot(out)
    assert {k: after.get(k) for k in caches} == caches
    assert "report.json" in after and leftovers(work) == []
    assert CliRunner().invoke(main, ["cache", "inspect", str(out / "entropy.cache")]).exit_code == 0


def test_calibrate_keeps_a_model_it_reads_from_its_output_folder(work):
    """The equalized model a run wrote, calibrated again into the same folder: it is read, so it stays."""
    out = work / "out"
    r = CliRunner().invoke(main, ["--quiet", "calibrate", str(work / "m.onnx"), "--data", str(work / "x0.npy"),
                                  "--algo", "minmax", "--equalize", "--out", str(out)])
    assert r.exit_code == 0, r.output
    model = out / "m.equalized.onnx"
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    r = CliRunner().invoke(main, ["--quiet", "calibrate", str(model), "--data", str(work / "x1.npy"),
                                  "--algo", "minmax", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert hashlib.sha256(model.read_bytes()).hexdigest() == digest


def test_calibrate_refuses_to_publish_over_its_model(work):
    """The model lies in --out under a name the run writes (minmax.cache): refused, nothing changes."""
    out = work / "out"
    assert calibrate(work, 0, out).exit_code == 0
    os.replace(out / "minmax.json", work / "kept.json")
    (out / "minmax.cache").unlink()
    os.link(work / "m.onnx", out / "minmax.cache")  # contrived, but a hard link to the model all the same
    before = snapshot(out)
    r = calibrate(work, 1, out)
    one_line_failure(r, "minmax.cache")
    assert snapshot(out) == before and leftovers(work) == []


@pytest.mark.parametrize("target", ["m.onnx", "out/entropy.cache", "hardlink-to-model"])
def test_build_refuses_an_engine_path_that_is_an_input(published, target):
    """Checked before TensorRT is loaded: no GPU needed to be told."""
    work = published
    os.link(work / "m.onnx", work / "hardlink-to-model")
    before = tree(work)
    r = CliRunner().invoke(main, ["build", str(work / "m.onnx"), "--cache", str(work / "out" / "entropy.cache"),
                                  "-o", str(work / target)])
    one_line_failure(r, target, "input")
    assert r.exit_code == 2 and tree(work) == before


def test_build_does_not_replace_a_json_that_is_not_an_engine_sidecar(published):
    work = published
    (work / "model.engine.json").write_text('{"my": "notes"}\n')
    before = tree(work)
    r = CliRunner().invoke(main, ["build", str(work / "m.onnx"), "--cache", str(work / "out" / "entropy.cache"),
                                  "-o", str(work / "model.engine")])
    one_line_failure(r, "model.engine.json", "not an engine sidecar")
    assert r.exit_code == 2 and tree(work) == before
