"""The architecture as import-linter contracts (pyproject.toml, [tool.importlinter]; docs/architecture.md): each room
imports only the rooms below it, the two backends do not know each other, heavy imports stay in their rooms, and no
package's modules import each other in a circle. A deliberate upward import breaks the layers."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("importlinter", reason="import-linter is in the dev extra")


def _lint(root: Path) -> subprocess.CompletedProcess:
    """lint-imports over the `calib` package found under `root` (first on the path), with the repository's contracts."""
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-c", code, "--config", str(root / "pyproject.toml"), "--no-cache"],
                          cwd=root, capture_output=True, text=True, env=env)


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "calib", tmp_path / "calib", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_contracts_hold():
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    kept = re.findall(r"KEPT", r.stdout)
    assert len(kept) == 5, r.stdout


def test_the_layers_name_every_room():
    """Every package and top-level module of calib stands in one layer (a new room must be placed)."""
    text = (ROOT / "pyproject.toml").read_text()
    layers = re.search(r'layers = \[(.*?)\]', text, re.S).group(1)
    named = set(re.findall(r"calib\.(\w+)", layers))
    rooms = {p.stem for p in (ROOT / "calib").iterdir()
             if (p.suffix == ".py" and not p.name.startswith("__")) or (p / "__init__.py").is_file()}
    assert rooms == named, (rooms - named, named - rooms)


@pytest.mark.parametrize("lower, upper, contract", [
    ("calib/quantize/cache.py", "calib.cli", "each room imports only rooms below it"),  # a room two floors down
    ("calib/deploy/simulate.py", "calib.evaluate.metrics", "each room imports only rooms below it"),
    ("calib/calibrate.py", "calib.deploy.precision", "each room imports only rooms below it"),  # side by side
    ("calib/quantize/qdq.py", "calib.recipe", "each room imports only rooms below it"),
    ("calib/runners/onnxruntime.py", "calib.runners.tensorrt.compat", "the two backends do not know each other"),
    ("calib/stats/kernels.py", "calib.stats.warmup", "no import cycle between the modules of one package"),
])
def test_a_forbidden_import_breaks_a_contract(tmp_path, lower, upper, contract):
    root = _copy(tmp_path)
    p = root / lower
    p.write_text(p.read_text() + f"\n\ndef _deliberate():\n    import {upper}  # noqa: F401\n")
    r = _lint(root)
    assert r.returncode != 0, r.stdout
    broken = r.stdout.split("Broken contracts")[-1]
    assert contract in broken and upper.rsplit(".", 1)[-1] in broken, r.stdout
