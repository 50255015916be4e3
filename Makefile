# Set-up is part of every target: a fresh clone needs only Python 3.10+ and this Makefile.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,ray]'
	@echo "compiling calib's statistics kernels (once; numba keeps them beside calib/stats/kernels.py)"
	$(BIN)/python -c "from calib.stats.kernels import warm_up; warm_up()"
	touch $(STAMP)

run: $(STAMP)          ## the main job: YOLOv3-tiny, all algorithms, report in runs/yolo/
	$(BIN)/calib run recipes/yolo.yaml
	@echo "The calib command is $(BIN)/calib: run '. $(BIN)/activate' to type it as calib."

test: $(STAMP)         ## the test suite (GPU tests skip where TensorRT is absent)
	$(BIN)/python -m pytest -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

bench: $(STAMP)        ## calibration speed/memory vs ONNX Runtime's calibrators; whole-command peak memory; shared cores
	$(BIN)/python benchmarks/bench_calibrate.py
	$(BIN)/python benchmarks/bench_memory.py
	$(BIN)/python benchmarks/bench_contention.py

clean:
	rm -rf runs .pytest_cache
