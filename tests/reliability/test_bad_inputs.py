"""Every bad input: one line naming the culprit, non-zero exit, no traceback, nothing half-written."""
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from calib.cli import main
from conftest import conv_relu_gap

TINY = """
name: tiny
model: tiny.onnx
calibration_data: {{kind: {kind}, path: {path}}}
preprocess: {{resize: [8, 8], mode: exact}}
calibration: {{algorithms: [minmax, entropy], batch_size: 4}}
output: out
"""


def one_line_failure(r, *needles):
    assert r.exit_code != 0, r.output
    assert "Traceback" not in r.output
    lines = [l for l in r.output.splitlines() if l.strip()]
    assert len(lines) == 1, r.output
    for n in needles:
        assert n in lines[0], lines[0]


def no_files(folder: Path):
    return not folder.exists() or not [p for p in folder.rglob("*") if p.is_file()]


def snapshot(folder: Path, skip=()) -> dict:
    """Every path under `folder` (but those under `skip`, calib's outputs) with its bytes: a user's folders must
    come out of a failed command byte-for-byte as they went in, with no file added (a __pycache__ included)."""
    skip = [Path(s) for s in skip]
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))
            if not any(p == s or s in p.parents for s in skip)}


@pytest.fixture
def workdir(tmp_path):
    conv_relu_gap(tmp_path / "tiny.onnx")
    (tmp_path / "imgs").mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        Image.fromarray(rng.integers(0, 255, (10, 12, 3), dtype=np.uint8)).save(tmp_path / "imgs" / f"{i}.png")
    return tmp_path


def run(tmp, kind="folder", path="imgs", extra=()):
    (tmp / "r.yaml").write_text(TINY.format(kind=kind, path=path))
    return CliRunner().invoke(main, ["--quiet", "run", str(tmp / "r.yaml"), *extra])


@pytest.mark.parametrize("content", [b"", b"GIF89a-truncated", b"plain text, not an image"])
def test_non_images_in_the_folder(workdir, content):
    for f in (workdir / "imgs").iterdir():
        f.write_bytes(content)
    one_line_failure(run(workdir), "unreadable")
    assert no_files(workdir / "out")


def test_images_of_other_modes_are_converted(workdir):
    Image.new("L", (10, 12), 100).save(workdir / "imgs" / "gray.png")
    Image.new("RGBA", (10, 12)).save(workdir / "imgs" / "rgba.png")
    Image.new("P", (10, 12)).save(workdir / "imgs" / "pal.png")
    assert run(workdir).exit_code == 0


def test_images_of_other_sizes_without_resize(workdir, tmp_path):
    Image.new("RGB", (30, 20)).save(workdir / "imgs" / "big.png")
    recipe = TINY.format(kind="folder", path="imgs")
    (workdir / "r.yaml").write_text(recipe.replace("preprocess: {resize: [8, 8], mode: exact}\n", ""))
    r = CliRunner().invoke(main, ["--quiet", "run", str(workdir / "r.yaml")])
    assert r.exit_code == 0, r.output  # resized to the model's fixed 8 x 8 input, as on the command line
    (workdir / "r.yaml").write_text(recipe.replace("{resize: [8, 8], mode: exact}", "{resize: [8], mode: shorter}"))
    r = CliRunner().invoke(main, ["--quiet", "run", str(workdir / "r.yaml"), "--out", str(workdir / "out2")])
    one_line_failure(r, "the model wants")  # shorter side 8: not the model's 8 x 8
    assert no_files(workdir / "out2")


def test_pickled_npz_is_refused(workdir):
    np.savez(workdir / "x.npz", a=np.array([object()], dtype=object))
    one_line_failure(run(workdir, "npz", "x.npz"), "x.npz")


def test_empty_dataset(workdir):
    (workdir / "empty").mkdir()
    one_line_failure(run(workdir, "folder", "empty"), "no images")


def test_nan_input_is_refused_naming_the_sample_or_left_out_on_request(workdir):
    x = np.random.default_rng(0).random((8, 3, 8, 8), dtype=np.float32)
    x[5, 0, 0, 0] = np.nan
    x[6, 1, 2, 2] = np.inf
    np.save(workdir / "x.npy", x)
    args = ["--quiet", "calibrate", str(workdir / "tiny.onnx"), "--data", str(workdir / "x.npy"),
            "--out", str(workdir / "c"), "--algo", "minmax"]
    one_line_failure(CliRunner().invoke(main, args), "x.npy", "sample 5", "NaN", "--skip-nonfinite")
    assert no_files(workdir / "c")
    r = CliRunner().invoke(main, [*args, "--skip-nonfinite"])
    assert r.exit_code == 0, r.output
    assert "left out 2 samples" in r.output
    from calib.quantize.cache import read_cache, read_sidecar

    c = read_cache(workdir / "c" / "minmax.cache")
    assert all(np.isfinite(v) for v in c.scales.values())
    side = read_sidecar(workdir / "c" / "minmax.cache")
    assert side["samples"] == 6 and side["extra"]["nonfinite_samples_left_out"] == 2
    assert c.amax("input") == pytest.approx(float(np.delete(x, [5, 6], 0).max()), rel=1e-6)


def test_all_nan_input_is_an_error(workdir):
    np.save(workdir / "x.npy", np.full((4, 3, 8, 8), np.nan, np.float32))
    r = CliRunner().invoke(main, ["--quiet", "calibrate", str(workdir / "tiny.onnx"), "--data", str(workdir / "x.npy"),
                                  "--out", str(workdir / "c")])
    one_line_failure(r, "tensor 'input'", "NaN")
    assert no_files(workdir / "c")


def test_yaml_tags_cannot_build_objects(workdir):
    (workdir / "r.yaml").write_text("name: !!python/object/apply:os.system ['echo pwned']\n")
    one_line_failure(CliRunner().invoke(main, ["run", str(workdir / "r.yaml")]), "r.yaml", "not valid YAML")


def test_output_that_is_a_symlink_is_refused(workdir, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    os.symlink(elsewhere, workdir / "out")
    one_line_failure(run(workdir), "not a link")
    assert not list(elsewhere.iterdir())


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write to read-only folders")
def test_read_only_output_folder(workdir):
    ro = workdir / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        r = run(workdir, extra=("--out", str(ro / "out")))
        one_line_failure(r)
    finally:
        ro.chmod(0o700)


def test_second_run_on_the_same_folder_refuses(workdir):
    lock = workdir / ".out.lock"
    lock.write_text(str(os.getpid()))  # this process is alive: as if a run were in progress
    one_line_failure(run(workdir), "another calib run")
    assert no_files(workdir / "out")
    lock.write_text("999999999")  # a dead owner: taken over
    assert run(workdir).exit_code == 0 and not lock.exists()


def test_ctrl_c_during_the_pass_leaves_nothing(workdir):
    import calib.calibrate as cal

    class Interrupting:
        def __len__(self):
            return 8

        def __iter__(self):
            yield {"input": np.zeros((4, 3, 8, 8), np.float32)}
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cal.calibrate(workdir / "tiny.onnx", Interrupting(), ["minmax"], out=workdir / "c")
    assert no_files(workdir / "c")


def test_unwritable_output_location(workdir):
    (workdir / "afile").write_text("x")
    r = run(workdir, extra=("--out", str(workdir / "afile" / "out")))
    one_line_failure(r, "afile")
