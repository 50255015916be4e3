"""Nothing outside --out is deleted, and inside it only what calib can prove it wrote: a manifest is data, not an
order (its names must be plain file names whose size and sha256 still match), and a staging folder is finished or
removed only when its marker says calib made it for this --out."""
import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calib.cli import main
import calib.io.publish as pub
from reliability.test_publish import calibrate, leftovers, work  # noqa: F401  (work: a fixture)


def tree(folder: Path) -> dict:
    """Every file under `folder` (outside --out too) with its content's sha256."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def loud(work, i, out, algo="minmax,entropy"):
    """calibrate without --quiet: its warnings are in the output."""
    return CliRunner().invoke(main, ["calibrate", str(work / "m.onnx"), "--data", str(work / f"x{i}.npy"),
                                     "--algo", algo, "--out", str(out)])


def add_to_manifest(out: Path, name: str, sha: str = "0" * 64, size: int = 1, legacy: bool = False) -> None:
    """List `name` in out's manifest, as calib writes entries (size and sha256) or as earlier versions did."""
    p = out / pub.MANIFEST
    doc = json.loads(p.read_text())
    doc["files"][name] = sha if legacy else {"sha256": sha, "size": size}
    p.write_text(json.dumps(doc))


@pytest.mark.parametrize("legacy", [False, True], ids=["entry", "legacy-entry"])
@pytest.mark.parametrize("foreign", [False, True], ids=["only-calib-files", "shared-folder"])
@pytest.mark.parametrize("hostile", ["../home", "..", "./", ".", "{abs}", "{abs}/precious.txt", "sub/../..", ""])
def test_a_manifest_naming_anything_but_a_plain_file_deletes_nothing(work, foreign, hostile, legacy):
    home = work / "home"
    out = home / "out"
    out.mkdir(parents=True)
    (home / "precious.txt").write_text("the user's file beside --out")
    if foreign:
        (out / "notes.txt").write_text("the user's file in --out")
    assert calibrate(work, 0, out).exit_code == 0
    add_to_manifest(out, hostile.format(abs=home), legacy=legacy)
    before = {k: v for k, v in tree(home).items() if not k.startswith("out/")}
    r = calibrate(work, 1, out)
    assert r.exit_code == 0, r.output
    after = tree(home)
    assert {k: v for k, v in after.items() if not k.startswith("out/")} == before
    assert ("out/notes.txt" in after) == foreign and "out/entropy.cache" in after
    assert leftovers(home) == [] and leftovers(out) == []


def test_a_listed_file_whose_content_changed_is_kept(work):
    """The previous run wrote old.txt; the user has since written their own file under that name."""
    out = work / "out"
    out.mkdir()
    (out / "notes.txt").write_text("the user's")
    assert calibrate(work, 0, out).exit_code == 0
    (out / "old.txt").write_text("written by the user after the run")
    add_to_manifest(out, "old.txt", hashlib.sha256(b"what calib wrote").hexdigest(), legacy=True)
    r = loud(work, 1, out)
    assert r.exit_code == 0, r.output
    assert (out / "old.txt").read_text() == "written by the user after the run"
    assert "old.txt: left alone" in r.output


def test_an_edited_result_is_not_swapped_away(work):
    """A folder of calib's files only, one edited by hand after the run: the next run that does not write that
    file keeps the edit (a folder swap would have deleted it)."""
    out = work / "out"
    assert calibrate(work, 0, out).exit_code == 0
    (out / "entropy.json").write_text('{"edited": "by hand"}\n')
    r = loud(work, 1, out, "minmax")
    assert r.exit_code == 0, r.output
    assert (out / "entropy.json").read_text() == '{"edited": "by hand"}\n'
    assert not (out / "entropy.cache").exists()  # calib's own, unchanged: removed as before
    assert "entropy.json: left alone" in r.output


def test_a_new_file_never_replaces_one_calib_did_not_write(work):
    """--out holds the user's own minmax.cache (not in any manifest): refused, naming it; nothing changes."""
    out = work / "out"
    out.mkdir()
    (out / "minmax.cache").write_text("the user's TensorRT cache")
    r = calibrate(work, 0, out)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "minmax.cache" in r.output.strip().splitlines()[-1] and r.output.count("error:") == 1
    assert tree(out) == {"minmax.cache": hashlib.sha256(b"the user's TensorRT cache").hexdigest()}
    assert leftovers(work) == []


def test_a_staging_folder_calib_did_not_make_is_left_and_named(work):
    """The issue's case: a folder beside --out under a staging name, with a journal saying 'remove notes.txt'."""
    out = work / "out"
    assert calibrate(work, 0, out).exit_code == 0
    (out / "notes.txt").write_text("the user's file")
    fake = work / ".out.calib-stage-1-abcd1234"
    fake.mkdir()
    (fake / pub.MANIFEST).write_text('{"files": {}}')
    (fake / pub.PREVIOUS).write_text('{"files": {"notes.txt": "x"}}')
    (fake / "theirs.txt").write_text("copied here with the folder")
    r = loud(work, 1, out)
    assert r.exit_code == 0, r.output
    assert (out / "notes.txt").read_text() == "the user's file"
    assert (fake / "theirs.txt").is_file() and (fake / pub.PREVIOUS).is_file()
    assert f"{fake.name}: left where it is" in r.output


def test_a_staging_folder_copied_from_elsewhere_is_not_ours(work):
    """A real staging folder of calib's, copied (another machine, a backup): its marker names another folder."""
    import shutil

    out = work / "out"
    assert calibrate(work, 0, out).exit_code == 0
    (out / "notes.txt").write_text("the user's file")
    real = work / ".out.calib-stage-7-0badc0de"
    real.mkdir()
    pub.mark_stage(real, out)
    copy = work / ".out.calib-stage-8-feedf00d"
    shutil.copytree(real, copy)
    shutil.rmtree(real)
    (copy / pub.PREVIOUS).write_text('{"files": {"notes.txt": "x"}}')
    r = loud(work, 1, out)
    assert r.exit_code == 0, r.output
    assert (out / "notes.txt").is_file() and copy.is_dir() and f"{copy.name}: left where it is" in r.output


def test_a_lock_file_that_is_not_calibs_is_not_removed(work):
    out = work / "out"
    (work / ".out.lock").write_text("my notes about out")
    r = calibrate(work, 0, out)
    assert r.exit_code == 2 and ".out.lock" in r.output and r.output.count("\n") == 1
    assert (work / ".out.lock").read_text() == "my notes about out" and not out.exists()
