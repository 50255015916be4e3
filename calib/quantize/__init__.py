"""What INT8 means for an ONNX graph, in ONNX and numpy only: the model's facts (model), TensorRT's scale ties, where
Q/DQ goes (placement) and the Q/DQ writer (qdq), layer patterns, and the calibration cache format with its checks;
input shapes a user fixes and the activation bytes per sample (shapes)."""
