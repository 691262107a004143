#!/usr/bin/env bash
# Installs the peer engines of benchmarks/engines.py into .venv-peers (repo root), apart from the
# project's .venv: none of them is a dependency of xtr.
#
#   bash benchmarks/peers/setup.sh            # idempotent; about 50 s fresh, 5 s again
#
# What goes in, and why these versions:
# - torch==2.13.0+cpu: the one torch whose CPU-only wheel this machine has (/opt/wheels, pip's
#   find-links); torch from PyPI, this version included, is the CUDA build and pulls GBs of
#   CUDA wheels. Pinned with its "+cpu" label so that pip never falls back to it. Elsewhere:
#   add --extra-index-url https://download.pytorch.org/whl/cpu to PIP below.
# - pylate==1.6.0 without its pins: it pins fast-plaid>=1.4.6.270,<=1.4.6.2110, whose builds
#   each pin one torch <= 2.11; its other requirements are installed as listed by its metadata.
# - scann==1.4.2 for PyLate's ScaNN index (no TensorFlow: scann's pybind builder does not need it).
# - fast-plaid==1.4.6.2110 and xtr-warp-rs==2.0.3.2110 (the versions PyLate 1.6 asks for) with
#   --no-deps (pip prints the pins left unmet, PyLate's and theirs, as ERRORs: expected):
#   their wheels are compiled against torch 2.11 (the ".2110" suffix), and neither runs under
#   torch 2.13; benchmarks/engines.py reports each one's exact error. fast-plaid's wheel vendors
#   torch 2.11's libc10 and segfaults on the first tensor handed to its Rust code (in that
#   libc10's c10::TensorImpl::incref_pyobject); xtr-warp-rs's wheel was linked against a CUDA
#   torch (it needs libc10_cuda.so and c10::cuda symbols) and does not load with a CPU torch.
#   Both also need c10::impl::cow::materialize_cow_storage, which torch 2.13 no longer exports.
#   No release is built for a later torch (the newest, fast-plaid 1.7.0.2110 and xtr-warp-rs
#   2.1.0.2110, fail the same way) and neither has a source distribution on PyPI, so neither
#   can be rebuilt here against torch 2.13.
# PyLate's Stanford PLAID backend is PyLate's own copy of the Stanford code (pylate.indexes.
# stanford_nlp): it needs no colbert-ai, only a C++ compiler (g++) for its torch extensions,
# compiled with ninja on first use into ~/.cache/torch_extensions (about a minute).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.venv-peers
test -x "$VENV/bin/python" || python3 -m venv "$VENV"
PIP="$VENV/bin/python -m pip install -q"
TORCH="torch==2.13.0+cpu"
$PIP --upgrade pip
$PIP "$TORCH"
$PIP --no-deps pylate==1.6.0
$PIP "$TORCH" "sentence-transformers==5.3.0" "transformers>=4.41.0,<=5.3.0" \
    "datasets>=2.20.0" "accelerate>=0.31.0" "pandas>=2.2.1" "ujson==5.12.0" \
    "ninja==1.11.1.4" "fastkmeans==0.5.0" "scann==1.4.2"
$PIP --no-deps "fast-plaid==1.4.6.2110" "xtr-warp-rs==2.0.3.2110"
$PIP "usearch>=2.21.0" "duckdb>=1.4.0" "joblib>=1.5.1"  # Theirs, less torch and maturin.
command -v "${CXX:-g++}" >/dev/null || echo "warning: no C++ compiler: PyLate's Stanford PLAID" \
    "backend (plaid_stanford) cannot build its torch extensions" >&2
"$VENV/bin/python" -c "import torch, pylate, scann; print('peers:', torch.__version__, pylate.__version__)"
