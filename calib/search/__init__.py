"""Which layers must stay in higher precision: the sensitivity ranking and the fallback search to meet an accuracy
budget on the CPU simulation (fallback, sensitivity), and the same search on real engines (engines)."""
