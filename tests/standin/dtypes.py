"""Data types and layer kinds shared by the parts of the TensorRT stand-in."""
from __future__ import annotations

import enum

import numpy as np
import onnx


class DataType(enum.IntEnum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4


NP = {DataType.FLOAT: np.float32, DataType.HALF: np.float16, DataType.INT8: np.int8, DataType.INT32: np.int32,
      DataType.BOOL: np.bool_}
ONNX_TO_DT = {onnx.TensorProto.FLOAT: DataType.FLOAT, onnx.TensorProto.INT64: DataType.INT32,
              onnx.TensorProto.INT32: DataType.INT32, onnx.TensorProto.FLOAT16: DataType.HALF}
LAYER_TYPE = {"Conv": "CONVOLUTION", "Relu": "ACTIVATION", "Clip": "ACTIVATION", "Gemm": "MATRIX_MULTIPLY",
              "MatMul": "MATRIX_MULTIPLY", "Add": "ELEMENTWISE", "Mul": "ELEMENTWISE", "GlobalAveragePool": "REDUCE",
              "Flatten": "SHUFFLE", "Reshape": "SHUFFLE", "Softmax": "SOFTMAX", "MaxPool": "POOLING",
              "Concat": "CONCATENATION", "Shape": "SHAPE", "Constant": "CONSTANT", "Sigmoid": "ACTIVATION"}
OTHER_LAYER = "UNARY"  # the layer type the stand-in gives any other op
QUANTIZABLE = {"CONVOLUTION", "MATRIX_MULTIPLY", "POOLING"}
ALGO = {"IInt8EntropyCalibrator2": "EntropyCalibration2", "IInt8MinMaxCalibrator": "MinMaxCalibration",
        "IInt8EntropyCalibrator": "EntropyCalibration", "IInt8LegacyCalibrator": "LegacyCalibration"}


def major_of(t) -> int:
    return int(str(t.__version__).split(".")[0])
