"""Hostile images, made in tmp_path: decoded as Pillow users expect, or skipped and counted, never a crash."""
import json
import os
import struct
import zlib

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from calib.cli import main
from calib.data.images import ImageTooLarge, open_image
from reliability.test_bad_inputs import TINY, one_line_failure, workdir  # noqa: F401  (fixture)


def run(tmp, extra_yaml="", *args):
    (tmp / "r.yaml").write_text(TINY.format(kind="folder", path="imgs") + extra_yaml)
    return CliRunner().invoke(main, ["--quiet", "run", str(tmp / "r.yaml"), *args])


def sixteen_bit(path, value):
    Image.fromarray(np.full((12, 10), value, np.uint16)).save(path)
    assert Image.open(path).mode in ("I;16", "I")


def test_sixteen_bit_png_is_scaled_not_saturated(tmp_path):
    sixteen_bit(tmp_path / "g.png", 30000)
    x = np.asarray(open_image(tmp_path / "g.png"))
    assert x.shape == (12, 10, 3) and np.all(x == round(30000 / 257))


def test_sixteen_bit_pngs_calibrate_on_their_real_range(workdir):  # noqa: F811
    for f in (workdir / "imgs").iterdir():
        f.unlink()
    for i in range(4):
        sixteen_bit(workdir / "imgs" / f"{i}.png", 10000 + 5000 * i)
    assert run(workdir).exit_code == 0
    from calib.quantize.cache import read_cache

    amax = read_cache(workdir / "out" / "minmax.cache").amax("input")
    assert amax == pytest.approx(25000 / 257 / 255, rel=0.01)  # saturated white would give 1.0


def test_exif_orientation_is_applied(tmp_path):
    a = np.zeros((10, 20, 3), np.uint8)  # 20 wide, 10 high: left half black, right half white
    a[:, 10:] = 255
    im = Image.fromarray(a)
    exif = im.getexif()
    exif[0x0112] = 6  # stored sideways: shown rotated 90 degrees clockwise
    im.save(tmp_path / "r.jpg", exif=exif.tobytes(), quality=95)
    x = np.asarray(open_image(tmp_path / "r.jpg"))
    assert x.shape == (20, 10, 3)  # upright: 10 wide, 20 high
    assert x[:8].mean() < 30 and x[12:].mean() > 225  # the black half on top


@pytest.mark.parametrize("mode,make,want", [
    ("LA", lambda: Image.new("LA", (4, 4), (200, 0)), 200),
    ("P+transparency", lambda: _palette(), 90),
    ("CMYK", lambda: Image.new("CMYK", (4, 4), (0, 0, 0, 0)), 255),
    ("1", lambda: Image.new("1", (4, 4), 1), 255),
    ("I", lambda: Image.fromarray(np.full((4, 4), 30000, np.int32), "I"), 117),
    ("F", lambda: Image.fromarray(np.full((4, 4), 0.5, np.float32), "F"), 128),
])
def test_other_modes_convert_to_the_expected_rgb(tmp_path, mode, make, want):
    p = tmp_path / ("x.tif" if mode in ("CMYK", "F", "I") else "x.png")
    make().save(p)
    x = np.asarray(open_image(p))
    assert x.shape == (4, 4, 3) and np.all(np.abs(x.astype(int) - want) <= 1), (mode, x[0, 0])


def _palette():
    im = Image.new("P", (4, 4), 1)
    im.putpalette([0, 0, 0, 90, 90, 90] + [0] * 762)
    im.info["transparency"] = 0
    return im


def _png_header_only(path, w, h):
    """A PNG that claims w x h pixels in a few dozen bytes (a decompression bomb's header)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 16))
                     + chunk(b"IEND", b""))


def test_decompression_bomb_is_skipped_and_counted(workdir):  # noqa: F811
    _png_header_only(workdir / "imgs" / "bomb.png", 30000, 30000)  # past Pillow's own limit
    Image.new("RGB", (40, 40)).save(workdir / "imgs" / "big.png")  # past the recipe's max_pixels below
    r = run(workdir, "", "--set", "calibration_data.max_pixels=1000", "--set", "calibration_data.max_bad=0.5")
    assert r.exit_code == 0, r.output
    skipped = json.loads((workdir / "out" / "report.json").read_text())["skipped_images"]["calibration"]
    assert sorted(os.path.basename(p) for p in skipped) == ["big.png", "bomb.png"]
    with pytest.raises(ImageTooLarge):
        open_image(workdir / "imgs" / "big.png", max_pixels=1000)


def test_too_many_bombs_is_one_line(workdir):  # noqa: F811
    for i in range(4):
        _png_header_only(workdir / "imgs" / f"{i}.png", 30000, 30000)
    one_line_failure(run(workdir), "unreadable")


def test_non_utf8_file_names_are_printable_in_logs_and_reports(workdir):  # noqa: F811
    bad = os.fsdecode(b"bad\xff\xfe.png")
    (workdir / "imgs" / bad).write_bytes(b"not an image")
    r = run(workdir, "", "--set", "calibration_data.max_bad=0.5")
    assert r.exit_code == 0, r.output
    out = workdir / "out"
    for name in ("report.json", "report.md", "run.log"):
        text = (out / name).read_bytes().decode("utf-8")  # valid UTF-8
        assert "bad\\xff\\xfe.png" in text.replace("\\\\", "\\"), name
