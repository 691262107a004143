"""xtr: XTR, ALIGNER and T5-ColBERT multi-vector retrieval in JAX/Flax.

`xtr.Searcher(index_dir, checkpoint).search(queries, top_k=10)` is the Python API of search
(`xtr.searcher`); it is imported on first use, so that `import xtr.<module>` stays light.
"""


def __getattr__(name: str):
  if name == "Searcher":
    from xtr import searcher  # pylint: disable=import-outside-toplevel
    return searcher.Searcher
  raise AttributeError(f"module 'xtr' has no attribute {name!r}")
