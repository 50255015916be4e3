"""The README's and the docs pages' commands and files exist as written: every `calib ...` line names a command and
options the CLI has (a renamed flag or a glob a shell would expand fails here), every repository path they name is
there, and every page in docs/ is linked from the README, whose links all resolve."""
import re
import shlex

import click

from calib.cli import main
from conftest import ROOT

README = (ROOT / "README.md").read_text()
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _pages() -> list[tuple[str, str]]:
    """(name, text) of the README, then of the docs pages in the order the README links them (the reading order: a
    page's examples may read what an earlier page's examples wrote)."""
    order = [m for m in LINK.findall(README) if m.startswith("docs/") and m.endswith(".md")]
    names = ["README.md"] + list(dict.fromkeys(order))
    return [(name, (ROOT / name).read_text()) for name in names]


PAGES = _pages()
ALL_TEXT = "\n".join(text for _, text in PAGES)


def test_every_docs_page_is_linked_from_the_readme_and_every_link_resolves():
    pages = {name for name, _ in PAGES}
    on_disk = {f"docs/{f.name}" for f in (ROOT / "docs").glob("*.md")}
    assert on_disk and on_disk <= pages, sorted(on_disk - pages)
    problems = []
    for name, text in PAGES:
        for target in LINK.findall(text):
            if re.match(r"\w+://", target):
                continue
            if not ((ROOT / name).parent / target.split("#")[0]).exists():
                problems.append(f"{name}: {target}")
    assert not problems, problems


def _command_lines(text: str = ALL_TEXT) -> list[str]:
    lines, out = text.splitlines(), []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        if line.startswith("calib ") and lines[i].startswith("    "):  # the indented command blocks
            out.append(line)
        i += 1
    return out


def _resolve(args: list[str]):
    cmd, rest = main, list(args)
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
        cmd = cmd.commands.get(rest[0])
        assert cmd is not None, f"no command {args}"
        rest = rest[1:]
    return cmd, rest


def test_readme_commands_use_options_the_cli_has():
    lines = _command_lines()
    assert len(lines) >= 40 and len(_command_lines(README)) >= 5  # the README's quick start among them
    for line in lines:
        raw = line.split("  #")[0]
        for tok in raw.split():
            if tok.startswith(("'", '"', "[-")) or tok.endswith("]") and not tok.endswith("=[") and "[" not in tok:
                continue  # quoted, or the optional-argument notation [--model FILE]
            assert not re.search(r"[\[*?]", tok), f"{line}: {tok!r} is a glob to the shell; quote it"
        args = [a for a in shlex.split(raw.replace("[--", "--").replace("]", " ") if "[--" in raw else raw)]
        cmd, rest = _resolve(args[1:])
        opts = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"-h", "--help"}
        for a in rest:
            if a.startswith("-") and not re.fullmatch(r"-?\d+(\.\d+)?", a):
                assert a.split("=")[0] in opts, f"{line}: {cmd.name} has no option {a.split('=')[0]}"


def test_readme_repository_paths_exist():
    paths = set(re.findall(r"(?<![\w./~-])((?:calib|tests|benchmarks|recipes|datasets|notebooks|docs)/[\w./-]*\w)",
                           ALL_TEXT))
    assert len(paths) >= 45
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing


def _makefile() -> str:
    return (ROOT / "Makefile").read_text()


def _target(name: str) -> list[str]:
    """The command lines of a Makefile target."""
    lines = _makefile().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{name}:"))
    out = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        out.append(line.strip())
    return out


def test_calib_as_printed_works_after_make_run(tmp_path):
    """`make run` installs calib into the Makefile's virtual environment, whose bin/ is not on PATH: the README
    says to activate it before its first `calib ...` command, `make run` says so too, and activating the
    environment the tests run in (make test's) puts a working `calib` on PATH."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    venv = re.search(r"^VENV \?= (\S+)$", _makefile(), re.M).group(1)
    activate = f". {venv}/bin/activate"
    assert activate in README
    assert README.index(activate) < README.index("\n    calib "), "the README says how before its first command"
    assert any("activate" in line for line in _target("run")), "make run ends by saying how to type calib"
    assert re.search(r'^calib = "calib\.__main__:entry"$', (ROOT / "pyproject.toml").read_text(), re.M)
    if sys.prefix == sys.base_prefix:
        pytest.skip("not run from a virtual environment (make test runs from .venv)")
    script = Path(sys.prefix) / "bin" / "activate"
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/bin:/bin"
    r = subprocess.run(["bash", "-c", f'. "{script}" && command -v calib && calib --version'], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.splitlines()[0]).parent == script.parent and "calib" in r.stdout.splitlines()[1]


PLACEHOLDER_NOTE = re.compile(r"\(([^()]*?\bstands? for your own\b[^()]*)\)", re.S)
FILE_LIKE = re.compile(r"\.(onnx|npy|npz|cache|engine|txt|json|yaml|yml|py|jpg|png)$")
COMMANDS = ("calib ", "trtexec ", "make ")


def _sections() -> list[tuple[str, str]]:
    """(title, text) of every section of every page, in reading order; a page's top heading opens its first."""
    out = []
    for name, text in PAGES:
        parts = re.split(r"^(#{1,3} .*)$", text, flags=re.M)
        out += [(f"{name} (top)", parts[0])] + [(f"{name} {parts[i]}", parts[i + 1]) for i in range(1, len(parts), 2)]
    return out


def _commands(text: str) -> list[str]:
    """The command lines of a section's indented blocks (continuations joined)."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("    ") and line.strip().startswith(COMMANDS):
            cmd = line.strip()
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            out.append(cmd)
        i += 1
    return out


def _recipe_output(recipe: str) -> str:
    import yaml

    out = yaml.safe_load((ROOT / recipe).read_text())["output"]
    return str(((ROOT / recipe).parent / out).resolve().relative_to(ROOT))


def _paths_of(cmd: str) -> tuple[list[str], list[str]]:
    """(paths a command reads, paths it writes) among its arguments."""
    import shlex

    raw = cmd.split("  #")[0].replace("[--", "--").replace("]", " ") if "[--" in cmd else cmd.split("  #")[0]
    args = shlex.split(raw)
    reads, writes = [], []
    if args[:2] == ["make", "run"]:
        run = next(line for line in _target("run") if " run " in line)
        writes.append(_recipe_output(run.split(" run ")[1].split()[0]))
    if args[:2] in (["calib", "run"], ["calib", "sensitivity"]) and "--out" not in args:
        writes.append(_recipe_output(args[2]) + ("/sensitivity" if args[1] == "sensitivity" else ""))
    for k, a in enumerate(args[1:], 1):
        if a.startswith("-"):
            if a.startswith("--saveEngine="):
                writes.append(a.split("=", 1)[1])
            elif "=" in a and not a.startswith("--set"):
                reads.append(a.split("=", 1)[1])
            continue
        if args[k - 1] in ("--out", "-o"):
            writes.append(a)
            continue
        a = re.sub(r"\.py:\w+$", ".py", a)
        reads.append(a)
    keep = [p for p in reads if ("/" in p or FILE_LIKE.search(p)) and "=" not in p and not p.startswith("zoo:")]
    return keep, [w.rstrip("/") for w in writes]


def _under(path: str, folders) -> bool:
    p = path.rstrip("/")
    return any(p == f.rstrip("/") or p.startswith(f.rstrip("/") + "/") for f in folders)


def test_readme_example_paths_exist_are_written_first_or_are_marked_as_yours():
    """Every path an example of the README or a docs page reads is in the repository, written by an earlier
    example (`make run`'s runs/yolo/, an `--out`/`-o` folder; the pages read in the README's order), or named in its
    section's "(`...` stand for your own files)" note."""
    written, checked, problems = [], 0, []
    for title, text in _sections():
        notes = [m.group(1) for m in PLACEHOLDER_NOTE.finditer(text)]
        mine = {n.rstrip("/") for note in notes for n in re.findall(r"`([^` ]+)`", note)
                if "/" in n or FILE_LIKE.search(n)}
        used = set()
        uses = [_paths_of(c) for c in _commands(text)]
        for block in re.findall(r"```python\n(.*?)```", text, re.S):  # the Python examples' file arguments
            strings = re.findall(r'(\bout=)?"([^"\n]+)"', block)
            uses.append(([s for o, s in strings if not o and ("/" in s or FILE_LIKE.search(s))],
                         [s.rstrip("/") for o, s in strings if o]))
        for reads, writes in uses:
            for p in reads:
                checked += 1
                if (ROOT / p).exists() or _under(p, written):
                    continue
                if _under(p, mine):
                    used |= {m for m in mine if _under(p, [m])}
                    continue
                problems.append(f"{title}: {p!r} is not in the repository, not written before, not marked as yours")
            written += writes
        for m in mine:
            if (ROOT / m).exists():
                problems.append(f"{title}: {m!r} is in the repository, not one of your files")
            elif m not in used and not _under(m, written):
                problems.append(f"{title}: the note names {m!r}, which no example there uses")
    assert checked >= 80
    assert not problems, "\n".join(problems)
