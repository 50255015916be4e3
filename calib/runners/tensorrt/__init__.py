"""The TensorRT backend: IInt8Calibrator implementations, the engine builder, the engine inspector and the
engine runner. Only this package imports tensorrt or cuda, and only when a function here is called."""
