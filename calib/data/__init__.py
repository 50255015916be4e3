"""Data sources: re-iterable, each __iter__ yields fresh dict[str, ndarray] batches (see DESIGN.md)."""
