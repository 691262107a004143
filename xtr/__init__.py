"""xtr: XTR, ALIGNER and T5-ColBERT multi-vector retrieval in JAX/Flax.

`xtr.Searcher(index_dir, checkpoint).search(queries, top_k=10)` is the Python API of search
(`xtr.retrieval.searcher`); it is imported on first use, so that `import xtr.<module>` stays light.
"""
import os
import sys

_SHOW_LOGS = ("v", "verbosity", "traceback")  # Flags (`xtr.cli`) that keep third-party logs.


def _quiet_tensorflow() -> None:
  """TensorFlow's C++ log lines (CUDA stubs, cuInit, oneDNN, CPU features) off stderr, unless
  TF_CPP_MIN_LOG_LEVEL is set or the command line has --verbosity (-v) or --traceback.
  TensorFlow reads the variable when it is imported, which a tool module does before its flags
  are parsed: hence here, when any xtr module is first imported."""
  names = {arg.lstrip("-").split("=")[0] for arg in sys.argv[1:] if arg.startswith("-")}
  if not names & set(_SHOW_LOGS):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


_quiet_tensorflow()


def __getattr__(name: str):
  if name == "Searcher":
    from xtr.retrieval import searcher  # pylint: disable=import-outside-toplevel
    return searcher.Searcher
  raise AttributeError(f"module 'xtr' has no attribute {name!r}")
