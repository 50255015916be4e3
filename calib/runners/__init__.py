"""Backends that run, build and calibrate a model and expose its intermediate tensors (ONNX Runtime on the CPU,
TensorRT on a GPU); they never decide what to run (see DESIGN.md, Runner protocol). budget: how many samples one
ONNX Runtime run may hold within a memory budget."""
