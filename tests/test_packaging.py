"""The distribution's name and the install hints: every hint names packages pip can install."""
import sys

import pytest

from calib.errors import DISTRIBUTION, EXTRAS, MissingExtraError, install_hint, require
from conftest import ROOT

tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_distribution_name_is_not_calib_and_the_command_stays():
    p = _project()
    assert p["name"] == DISTRIBUTION and p["name"] != "calib"  # `calib` on PyPI is an unrelated package
    assert p["scripts"] == {"calib": "calib.__main__:entry"}
    assert p["license"] == "Apache-2.0"  # an SPDX string: no deprecation warnings on install


def test_install_hints_mirror_the_extras():
    extras = _project()["optional-dependencies"]
    for name, reqs in EXTRAS.items():
        assert tuple(extras[name]) == reqs, name
    assert "nbconvert" in " ".join(extras["dev"])


def test_missing_module_names_an_installable_command():
    with pytest.raises(MissingExtraError) as e:
        require("calib_no_such_module", "torch")
    msg = str(e.value)
    assert install_hint("torch") in msg and "'torch>=2.1' 'torchvision>=0.16'" in msg and "calib[" not in msg


def test_a_zoo_model_needing_torch_says_so_before_downloading(tmp_path, monkeypatch):
    import importlib.util

    from calib.zoo import registry as zoo

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")

    def no_download(*a):
        raise AssertionError("downloaded before the missing extra was said")

    monkeypatch.setattr(zoo, "_download", no_download)
    with pytest.raises(MissingExtraError, match=r"torch is not installed: pip install 'torch>=2.1'"):
        zoo.fetch("mobilenet_v2", tmp_path)
    assert not any(tmp_path.iterdir())
