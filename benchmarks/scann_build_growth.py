"""Where a ScaNN build's memory grows with the corpus: the build (sample training, upserts) and the
serialization, for T random 128-d tokens, in a fresh process per T.

  for T in 200000 800000; do .venv/bin/python benchmarks/scann_build_growth.py $T; done

Prints the peak resident memory (VmHWM, reset by /proc/self/clear_refs once the tokens exist)
over the RSS before the build: after `scann.build`, then after `scann.write` (ScaNN's
`serialize`).
"""
import sys
import tempfile

import numpy as np

from xtr.index import scann


def _status_mb(field: str) -> float:
  with open("/proc/self/status", encoding="ascii") as f:
    return next(int(line.split()[1]) / 1024 for line in f if line.startswith(field + ":"))


def main(num_tokens: int, dim: int = 128) -> None:
  rng = np.random.default_rng(0)
  tokens = np.concatenate([
      rng.standard_normal((50_000, dim), dtype=np.float32).astype(np.float16)
      for _ in range(num_tokens // 50_000)
  ])
  with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
    f.write("5")
  base = _status_mb("VmRSS")
  config = scann.ScannConfig(training_sample_size=100_000, num_leaves=300)
  searcher, _ = scann.build(lambda: np.array_split(tokens, 4), len(tokens), config)
  built = _status_mb("VmHWM") - base
  with tempfile.TemporaryDirectory() as out:
    scann.write(searcher, out)
  print(f"{len(tokens):,} tokens of dim {dim}: peak over the start {built:.0f} MiB after the "
        f"build, {_status_mb('VmHWM') - base:.0f} MiB after serializing")


if __name__ == "__main__":
  main(int(sys.argv[1]))
