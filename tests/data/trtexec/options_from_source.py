"""Write one TensorRT version's trtexec option list from NVIDIA's own source, as the files beside this script.

    python options_from_source.py TENSORRT_CLONE REF VERSION [NOTE ...] > VERSION.txt

TENSORRT_CLONE is a clone of github.com/NVIDIA/TensorRT, REF a tag of it (v8.6.1, v10.13.3, v11.1). The options
are the "--name" literals that trtexec's parsers read: samples/common/sampleOptions.cpp up to
TaskInferenceOptions::parse (the parsers after it serve other samples: SafeBuilderOptions reads its own --int8)
and samples/trtexec/trtexec.cpp. The script checks that every option of `trtexec --help` (the help text in
sampleOptions.cpp) is among them. Each NOTE becomes one more comment line of the header.
"""
from __future__ import annotations

import re
import subprocess
import sys

OPTIONS = "samples/common/sampleOptions.cpp"
TRTEXEC = "samples/trtexec/trtexec.cpp"
LITERAL = re.compile(r'"(--[A-Za-z][A-Za-z0-9]*)=?"')
HELP_LINE = re.compile(r'"\s+(--[A-Za-z][A-Za-z0-9]*)')


def show(clone: str, ref: str, path: str) -> str:
    return subprocess.run(["git", "-C", clone, "show", f"{ref}:{path}"], capture_output=True, text=True,
                          check=True).stdout


def options(clone: str, ref: str) -> list[str]:
    src = show(clone, ref, OPTIONS)
    parsers = src[:src.index("void TaskInferenceOptions::parse")]
    found = set(LITERAL.findall(parsers)) | set(LITERAL.findall(show(clone, ref, TRTEXEC)))
    start = src.index("void BaseModelOptions::help")
    end = src.find("void TaskInferenceOptions::help", start)
    helped = set(HELP_LINE.findall(src[start:end if end > 0 else len(src)]))
    if not helped or helped - found:
        raise SystemExit(f"{ref}: options in --help that no parser reads: {sorted(helped - found)}")
    return sorted(found, key=str.lower)


def main(clone: str, ref: str, version: str, *notes: str) -> None:
    commit = subprocess.run(["git", "-C", clone, "rev-parse", f"{ref}^{{commit}}"], capture_output=True, text=True,
                            check=True).stdout.strip()
    print(f"# trtexec options of TensorRT {version}: NVIDIA/TensorRT {ref} (commit {commit}),\n"
          f"# {OPTIONS} (the parsers before TaskInferenceOptions::parse) and {TRTEXEC}:\n"
          "# the \"--name\" literals they read, every option of `trtexec --help` among them.\n"
          "# Written by options_from_source.py.")
    for note in notes:
        print(f"# {note}")
    print("\n".join(options(clone, ref)))


if __name__ == "__main__":
    main(*sys.argv[1:])
