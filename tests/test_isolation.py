"""The test session keeps out of the user's calib folder, yet reuses the zoo models fetched there."""
from pathlib import Path

from calib import zoo
from calib.zoo import thirdparty
from conftest import USER_HOME, isolated_home


def test_session_home_is_not_the_users(calib_home):
    assert zoo.home() == calib_home / "zoo"
    assert USER_HOME.resolve() not in (calib_home.resolve(), *calib_home.resolve().parents)


def test_isolated_home_copies_fetched_models_only(tmp_path):
    user = tmp_path / "user"
    (user / "zoo" / "net").mkdir(parents=True)
    (user / "zoo" / "net" / "net.onnx").write_bytes(b"onnx")
    (user / "zoo" / "net" / "classes.txt").write_text("a\n")
    (user / "zoo" / "half").mkdir()  # an interrupted fetch: no model file
    (user / "zoo" / "trt-10.0.timing").write_bytes(b"real timing cache")
    pnet = thirdparty.model_path("mtcnn-pnet", user / "thirdparty")
    pnet.parent.mkdir(parents=True)
    pnet.write_bytes(b"pnet")
    (user / "thirdparty" / "archives").mkdir()
    (user / "thirdparty" / "archives" / "big.tar.gz").write_bytes(b"archive")
    home = isolated_home(tmp_path / "session", user)
    assert thirdparty.model_path("mtcnn-pnet", home / "thirdparty").read_bytes() == b"pnet"
    assert not (home / "thirdparty" / "archives").exists()  # archives: thirdparty_root copies the ones it needs
    assert zoo.model_path("net", home / "zoo").read_bytes() == b"onnx"
    assert (home / "zoo" / "net" / "classes.txt").is_file()
    assert not (home / "zoo" / "half").exists() and not (home / "zoo" / "trt-10.0.timing").exists()
    (home / "zoo" / "net" / "net.onnx").write_bytes(b"changed")
    assert (user / "zoo" / "net" / "net.onnx").read_bytes() == b"onnx"  # a copy, not the user's file
    assert isolated_home(tmp_path / "empty", Path(tmp_path / "nobody")).is_dir()
