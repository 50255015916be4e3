"""Write the real photos that calib's recipes use, from the images bundled in scikit-image and scikit-learn.

    python datasets/make_photos.py            # needs scikit-image and scikit-learn (pip install -e '.[dev]')

Writes datasets/photos/ (the originals as JPEG, with LICENSES.md: each image's own provenance and licence
text, taken from the package that ships it) and datasets/photos_crops/ (seeded random crops and flips of the
originals, so that calibration and evaluation have a couple of hundred distinct images; the first crops do not
depend on --crops), with photos_crops/sources.json naming each crop's original (the evaluation resamples
crops of one photo together: they are not independent samples). Deterministic: the same package versions give
the same files.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
from PIL import Image

SKIMAGE = ["astronaut", "chelsea", "coffee", "rocket", "camera", "coins",
       "hubble_deep_field", "retina", "brick", "grass", "gravel", "horse", "moon", "page", "text", "cell"]


def _licence(doc: str) -> str:
    text = " ".join((doc or "").split())
    hits = [s for s in re.split(r"(?<=\.)\s", text) if re.search(r"copyright|licen|public domain|CC0|CC-BY", s, re.I)]
    return " ".join(hits) or "see the scikit-image documentation"


def originals() -> list[tuple[str, Image.Image, str]]:
    import skimage.data as sd
    from sklearn.datasets import load_sample_images

    out = []
    for n in SKIMAGE:
        fn = getattr(sd, n)
        a = np.asarray(fn())
        if a.dtype == bool:
            a = a.astype(np.uint8) * 255
        if a.ndim == 2:
            a = np.stack([a] * 3, -1)
        out.append((n, Image.fromarray(a[..., :3].astype(np.uint8)), f"scikit-image `skimage.data.{n}`: "
                    + _licence(fn.__doc__)))
    sk = load_sample_images()
    readme = " ".join(sk.DESCR.split()) if hasattr(sk, "DESCR") else ""
    for fname, a in zip(sk.filenames, sk.images):
        stem = Path(fname).stem
        out.append((stem, Image.fromarray(a), f"scikit-learn `load_sample_images()` {Path(fname).name}: "
                    "Creative Commons Attribution 2.0 (https://creativecommons.org/licenses/by/2.0/), "
                    "from Flickr, see sklearn/datasets/images/README.txt. " + readme[:0]))
    return out


def crops(images, count: int, seed: int = 2026, max_side: int = 512):
    rng = np.random.default_rng(seed)
    for i in range(count):
        name, img, _ = images[i % len(images)]
        w, h = img.size
        s = rng.uniform(0.5, 1.0)
        cw, ch = max(32, int(w * s)), max(32, int(h * s))
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        c = img.crop((x, y, x + cw, y + ch))
        if rng.random() < 0.5:
            c = c.transpose(Image.FLIP_LEFT_RIGHT)
        r = max_side / max(c.size)
        if r < 1:
            c = c.resize((round(c.size[0] * r), round(c.size[1] * r)), Image.BILINEAR)
        yield f"{i:03d}_{name}.jpg", c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).parent))
    ap.add_argument("--crops", type=int, default=192)
    args = ap.parse_args()
    root = Path(args.out)
    photos, crop_dir = root / "photos", root / "photos_crops"
    photos.mkdir(parents=True, exist_ok=True)
    crop_dir.mkdir(parents=True, exist_ok=True)
    images = originals()
    lines = ["# Provenance and licences of datasets/photos and datasets/photos_crops", "",
             "Crops in photos_crops/ are derived from the originals below (file names carry the source name).", ""]
    for name, img, lic in images:
        img.save(photos / f"{name}.jpg", quality=90)
        lines.append(f"- `{name}.jpg` ({img.size[0]}x{img.size[1]}): {lic}")
    sources = {}
    for fname, c in crops(images, args.crops):
        c.save(crop_dir / fname, quality=88)
        sources[fname] = f"../photos/{fname.split('_', 1)[1]}"
    (crop_dir / "sources.json").write_text(json.dumps(sources, indent=1, sort_keys=True) + "\n")
    (root / "LICENSES.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {len(images)} photos to {photos} and {args.crops} crops to {crop_dir}")


if __name__ == "__main__":
    main()
