"""The ground floor every room may use: atomic and bounded file I/O (files), all-or-nothing output folders (publish),
YAML with limits, data fingerprints, progress and logging, memory release and NVTX ranges."""
