"""FP32 vs INT8 comparison: per layer, per output, on the task metric; and the report."""
