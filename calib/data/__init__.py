"""Data sources with the model's preprocessing: image folders, COCO and YOLO sets, npy/npz, text, torchvision;
re-iterable, each __iter__ yields fresh dict[str, ndarray] batches (see DESIGN.md); rebatch cuts them to a model's
fixed batch."""
