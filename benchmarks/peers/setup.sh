#!/usr/bin/env bash
# Installs the peer engines of benchmarks/engines.py into .venv-peers (repo root), apart from the
# project's .venv: none of them is a dependency of xtr.
#
#   bash benchmarks/peers/setup.sh            # idempotent; ~5 GB, a few minutes fresh
#
# What goes in, and why these versions:
# - torch==2.11.0 from PyPI: its CUDA build (~4.7 GB with its CUDA wheels), which runs on a
#   machine without a GPU. fast-plaid and xtr-warp-rs are compiled against torch 2.11 (their
#   ".2110" suffix) and xtr-warp-rs against a CUDA torch (it needs libc10_cuda.so): under the
#   CPU-only torch 2.13 this venv had before, fast-plaid segfaulted on its first tensor and
#   xtr-warp-rs did not load (c10::cuda and c10::impl::cow::materialize_cow_storage symbols).
# - pylate==1.6.0 without its pins (it pins one fast-plaid build per torch); its other
#   requirements are installed as listed by its metadata.
# - scann==1.4.2 for PyLate's ScaNN index (no TensorFlow: scann's pybind builder does not need it).
# - fast-plaid==1.4.6.2110 (the version PyLate 1.6 asks for) and xtr-warp-rs==2.1.0.2110 (a
#   newer one than PyLate's 2.0.3: it can train its codec on a sample, which 384-d tokens need;
#   PyLate's WARP builds and searches with it, benchmarks/engines.py) with --no-deps (pip prints the pins left unmet, e.g. maturin and setuptools, as ERRORs: expected),
#   then what they import: duckdb, pyarrow, joblib, usearch.
# PyLate's Stanford PLAID backend is PyLate's own copy of the Stanford code (pylate.indexes.
# stanford_nlp): it needs no colbert-ai, only a C++ compiler (g++) for its torch extensions,
# compiled with ninja on first use into ~/.cache/torch_extensions (about a minute).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.venv-peers
test -x "$VENV/bin/python" || python3 -m venv "$VENV"
PIP="$VENV/bin/python -m pip install -q"
TORCH="torch==2.11.0"
$PIP --upgrade pip
$PIP "$TORCH"
$PIP --no-deps pylate==1.6.0
$PIP "$TORCH" "sentence-transformers==5.3.0" "transformers>=4.41.0,<=5.3.0" \
    "datasets>=2.20.0" "accelerate>=0.31.0" "pandas>=2.2.1" "ujson==5.12.0" \
    "ninja==1.11.1.4" "fastkmeans==0.5.0" "scann==1.4.2"
$PIP --no-deps "fast-plaid==1.4.6.2110" "xtr-warp-rs==2.1.0.2110"
$PIP "usearch>=2.21.0" "duckdb>=1.4.0" "joblib>=1.5.1" "pyarrow>=14"  # Theirs, less maturin.
# benchmarks/peers/device.py scores its rankings with xtr.evaluation (PYTHONPATH=.): its imports.
$PIP "gin-config==0.5.0" "pytrec-eval-terrier==0.5.11" "absl-py==2.5.1"
command -v "${CXX:-g++}" >/dev/null || echo "warning: no C++ compiler: PyLate's Stanford PLAID" \
    "backend (plaid_stanford) cannot build its torch extensions" >&2
"$VENV/bin/python" -c "import torch, pylate, scann; print('peers:', torch.__version__, pylate.__version__)"
