"""Files that belong together (a cache and its sidecar, an engine and its .json) are replaced both or neither."""
import os

import pytest

import calib.io.files as cio


def _pair(tmp_path, a=b"A1", b=b"B1"):
    pa, pb = tmp_path / "x.json", tmp_path / "x.bin"
    cio.replace_together([(pa, a), (pb, b)])
    return pa, pb


def test_a_failure_while_writing_changes_nothing(tmp_path, monkeypatch):
    pa, pb = _pair(tmp_path)
    real, calls = cio._stage_bytes, []

    def full(path, data):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(cio, "_stage_bytes", full)
    with pytest.raises(OSError):
        cio.replace_together([(pa, b"A2"), (pb, b"B2")])
    assert (pa.read_bytes(), pb.read_bytes()) == (b"A1", b"B1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.bin", "x.json"]


def test_a_kill_between_the_renames_is_undone_at_the_next_read(tmp_path, monkeypatch):
    pa, pb = _pair(tmp_path)
    real, done = os.replace, []

    def killed(a, b):
        done.append(b)
        if len(done) == 2:
            raise KeyboardInterrupt
        return real(a, b)

    monkeypatch.setattr(cio.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        cio.replace_together([(pa, b"A2"), (pb, b"B2")])
    monkeypatch.setattr(cio.os, "replace", real)
    assert (pa.read_bytes(), pb.read_bytes()) == (b"A2", b"B1")  # mixed
    consistent = lambda: pa.read_bytes()[1:] == pb.read_bytes()[1:]  # noqa: E731
    assert cio.recover_together([pa, pb], consistent)
    assert (pa.read_bytes(), pb.read_bytes()) == (b"A1", b"B1")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(cio.PREV)]


def test_a_finished_replacement_keeps_the_new_pair_and_drops_stale_links(tmp_path):
    pa, pb = _pair(tmp_path)
    cio.replace_together([(pa, b"A2"), (pb, b"B2")])
    os.link(pa, pa.with_name(pa.name + cio.PREV))  # as if killed after both renames, before the clean-up
    assert not cio.recover_together([pa, pb], lambda: True)
    assert (pa.read_bytes(), pb.read_bytes()) == (b"A2", b"B2")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(cio.PREV)]
