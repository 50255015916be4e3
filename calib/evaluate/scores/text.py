"""Strings against FP32's: exact match and the edit (Levenshtein) distance behind the character error rate."""
from __future__ import annotations

import numpy as np


def edit_distance(a: str, b: str) -> int:
    """Insertions, deletions and substitutions that turn `a` into `b`."""
    if a == b:
        return 0
    if not a or not b:
        return max(len(a), len(b))
    prev = np.arange(len(b) + 1)
    for i, ca in enumerate(a, 1):
        cur = np.empty_like(prev)
        cur[0] = i
        same = np.fromiter((ca == cb for cb in b), bool, len(b))
        sub = prev[:-1] + ~same
        for j in range(1, len(b) + 1):  # the insertion term depends on the row being built
            cur[j] = min(sub[j - 1], prev[j] + 1, cur[j - 1] + 1)
        prev = cur
    return int(prev[-1])


def compare(ref: list[str], test: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sample: (exact match 0/1, edits from FP32's string to the test's, characters in FP32's string)."""
    exact = np.fromiter((r == t for r, t in zip(ref, test)), bool, len(ref))
    edits = np.fromiter((edit_distance(r, t) for r, t in zip(ref, test)), np.int64, len(ref))
    lens = np.fromiter((len(r) for r in ref), np.int64, len(ref))
    return exact, edits, lens
