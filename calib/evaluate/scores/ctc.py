"""The built-in CTC head of text recognizers (`--head ctc --charset FILE`, recipe `evaluation.task: text` with
`evaluation.charset`): one output of per-step class scores [N, T, C], greedy decoding (the best class per step,
repeats collapsed, the blank, class 0, dropped), class i > 0 the charset file's line i (as PaddleOCR's and
CRNN's exports number them; a class past the file's lines is written as a space, PaddleOCR's use_space_char)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from calib.errors import DataError, ModelError

MAX_CHARSET_BYTES = 16 << 20


def read_charset(path: str | Path, flag: str = "--charset") -> list[str]:
    from calib.io.files import read_bounded

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{flag} {path}: file not found")
    try:
        text = read_bounded(path, MAX_CHARSET_BYTES, "charset").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelError(f"{flag} {path}: not UTF-8 text ({exc})") from None
    chars = [ln.rstrip("\r") for ln in text.split("\n")]
    while chars and chars[-1] == "":
        chars.pop()
    if not chars:
        raise ModelError(f"{flag} {path}: no characters (one per line expected)")
    return chars


def greedy(scores: np.ndarray, charset: list[str]) -> list[str]:
    """Strings of a batch of per-step class scores [N, T, C] (blank 0)."""
    best = np.asarray(scores).argmax(-1)
    out = []
    for row in best:
        keep = np.ones(row.shape, bool)
        keep[1:] = row[1:] != row[:-1]
        keep &= row != 0
        out.append("".join(charset[i - 1] if i - 1 < len(charset) else " " for i in row[keep]))
    return out


class CtcHead:
    """A postprocess hook's interface (calib.evaluate.postprocess.Hook): outputs -> ('text', strings)."""

    def __init__(self, charset_path: str | Path, output: str | None = None, flag: str = "--charset"):
        self.path = Path(charset_path)
        self.charset = read_charset(charset_path, flag)
        self.output = output
        self.label = f"ctc head ({self.path.name})"

    def describe(self) -> str:
        return f"ctc greedy decoding, blank 0, charset {self.path.name} ({len(self.charset)} characters)"

    def __call__(self, outputs: dict) -> tuple[str, list[str]]:
        name = self.output or next(iter(outputs))
        x = outputs[name]
        if x.ndim != 3:
            raise DataError(f"{self.label}: output '{name}' is {list(x.shape)}; CTC decoding takes per-step class "
                            "scores [N, T, C]")
        if x.shape[-1] > len(self.charset) + 2:
            raise DataError(f"{self.label}: output '{name}' scores {x.shape[-1]} classes; the charset has "
                            f"{len(self.charset)} characters (+ blank, + space): is it the model's?")
        return "text", greedy(x, self.charset)
