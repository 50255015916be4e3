"""A file of text lines as a Source for a transformer: one sample per non-empty line, tokenized with a Hugging Face
`tokenizers` Tokenizer (tokenizer.json), padded and truncated to max_length, fed as input_ids / attention_mask /
token_type_ids (those the model takes, by name or through the data spec's `inputs`)."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from calib.errors import DataError, require
from calib.io.reading import read_text

log = logging.getLogger(__name__)

FIELDS = ("input_ids", "attention_mask", "token_type_ids")
DEFAULT_MAX_LENGTH = 128
MAX_TEXT_BYTES = 256 << 20
_INT = {6: np.int32, 7: np.int64}  # ONNX elem_type -> the integer type fed


def read_lines(path: str | Path) -> list[str]:
    """The non-empty lines of a UTF-8 text file (stripped); none is an error naming the file."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: text file not found")
    text = read_text(path, MAX_TEXT_BYTES, "text file", DataError)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise DataError(f"{path}: no text lines (one sample per non-empty line)")
    return lines


def load_tokenizer(path: str | Path, key: str = "tokenizer"):
    """A `tokenizers.Tokenizer` from a tokenizer.json; a missing or unreadable file names `key` and the file."""
    path = Path(path) if path else None
    if path is None or not str(path).strip():
        raise DataError(f"{key}: a text data source needs a tokenizer.json")
    if not path.is_file():
        raise DataError(f"{key}: tokenizer file not found: {path}")
    tokenizers = require("tokenizers", "text")
    try:
        return tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises plain Exceptions
        raise DataError(f"{key}: {path}: not a readable tokenizer.json ({exc})") from None


def feeds_of(inputs, mapping=None, label: str = "text data") -> dict[str, str]:
    """Model input -> tokenizer field (input_ids, attention_mask, token_type_ids) for the model's inputs."""
    mapping = dict(mapping or {})
    names = [n for n, _, _ in inputs]
    unknown = sorted(set(mapping) - set(names))
    if unknown:
        raise DataError(f"{label}: inputs: '{unknown[0]}' is not an input of the model (inputs: {names})")
    out = {}
    for name in names:
        field = mapping.get(name, name)
        if field not in FIELDS:
            raise DataError(f"{label}: the text source gives {', '.join(FIELDS)}; nothing feeds model input "
                            f"'{name}'" + (f" ('{field}' is none of them)" if name in mapping else
                                           " (map it with 'inputs')"))
        out[name] = field
    return out


def model_max_length(inputs) -> int | None:
    """The model's static sequence length (the second dimension of its inputs), if it has one."""
    dims = {d[1] for _, d, _ in inputs if len(d) >= 2 and isinstance(d[1], int) and d[1] > 0}
    return dims.pop() if len(dims) == 1 else None


def _pad(tok) -> tuple[int, str]:
    """The tokenizer's own padding token, else [PAD] or <pad> where the vocabulary has one, else id 0."""
    if tok.padding is not None:
        return tok.padding["pad_id"], tok.padding["pad_token"]
    for t in ("[PAD]", "<pad>"):
        i = tok.token_to_id(t)
        if i is not None:
            return i, t
    return 0, tok.id_to_token(0) or "[PAD]"


class TextSource:
    """Tokenized lines of text, `batch_size` at a time, as int64 (or the model's int32) arrays [N, max_length]."""

    def __init__(self, lines: list[str], tokenizer: str | Path, inputs, batch_size: int = 8,
                 max_length: int | None = None, mapping=None, label: str = "<text>"):
        if batch_size < 1:
            raise DataError(f"batch size must be >= 1, got {batch_size}")
        if isinstance(lines, (str, Path)):
            raise TypeError("TextSource takes the lines themselves (calib.data.text.read_lines reads a file)")
        if not lines:
            raise DataError(f"{label}: no text lines")
        self.lines, self.label = list(lines), label
        self.feeds = feeds_of(inputs, mapping, label)
        self.dtypes = {n: _INT.get(et, np.int64) for n, _, et in inputs if n in self.feeds}
        self.max_length = max_length or model_max_length(inputs) or DEFAULT_MAX_LENGTH
        self.tokenizer = load_tokenizer(tokenizer)
        pad_id, pad_token = _pad(self.tokenizer)
        self.tokenizer.enable_truncation(max_length=self.max_length)
        self.tokenizer.enable_padding(length=self.max_length, pad_id=pad_id, pad_token=pad_token)
        self.batch_size = batch_size

    def __len__(self) -> int:
        return len(self.lines)

    def iter_with_meta(self):
        """(batch, samples, meta) as the image sources give them; these samples carry no labels."""
        for batch in self:
            n = len(next(iter(batch.values())))
            yield batch, [None] * n, [None] * n

    def __iter__(self) -> Iterator[dict]:
        attr = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
        for lo in range(0, len(self.lines), self.batch_size):
            enc = self.tokenizer.encode_batch(self.lines[lo:lo + self.batch_size])
            yield {name: np.array([getattr(e, attr[f]) for e in enc], dtype=self.dtypes[name])
                   for name, f in self.feeds.items()}
