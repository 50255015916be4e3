"""The README's commands and files exist as written: every `calib ...` line names a command and options the CLI
has (a renamed flag or a glob a shell would expand fails here), and every repository path it names is there."""
import re
import shlex

import click

from calib.cli import main
from conftest import ROOT

README = (ROOT / "README.md").read_text()


def _command_lines() -> list[str]:
    lines, out = README.splitlines(), []
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
    assert len(lines) >= 20
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
                           README))
    assert len(paths) >= 20
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing
