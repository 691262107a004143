"""Where a ScaNN build's memory grows with the corpus: the build (sample training, upserts) and the
serialization, for T random 128-d tokens, in a fresh process per T.

  for T in 200000 800000; do .venv/bin/python benchmarks/scann_build_growth.py $T; done
  .venv/bin/python benchmarks/scann_build_growth.py 1000000 --num_leaves=1000000 \
      --training_sample_size=250000 --spherical --reorder_k=4000 --reorder_type=int8 \
      [--leaf_size=200]

Prints the peak resident memory (VmHWM, reset by /proc/self/clear_refs once the tokens exist)
over the RSS before the build: after `scann.build`, then after `scann.write` (ScaNN's
`serialize`). The options are `ScannConfig`'s (by default 300 leaves trained on 100,000 tokens);
a sample of all T tokens builds ScaNN from all of them at once, with no upserts.
"""
import argparse
import tempfile

import numpy as np

from xtr.index import scann


def _status_mb(field: str) -> float:
  with open("/proc/self/status", encoding="ascii") as f:
    return next(int(line.split()[1]) / 1024 for line in f if line.startswith(field + ":"))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("num_tokens", type=int)
  parser.add_argument("--num_leaves", type=int, default=300)
  parser.add_argument("--training_sample_size", type=int, default=100_000)
  parser.add_argument("--leaf_size", type=int, default=0)
  parser.add_argument("--spherical", action="store_true")
  parser.add_argument("--reorder_k", type=int, default=0)
  parser.add_argument("--reorder_type", default="float32", help="float32, bfloat16 or int8")
  parser.add_argument("--training_threads", type=int, default=1)
  args = parser.parse_args()
  rng = np.random.default_rng(0)
  tokens = np.concatenate([
      rng.standard_normal((50_000, 128), dtype=np.float32).astype(np.float16)
      for _ in range(args.num_tokens // 50_000)
  ])
  with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
    f.write("5")
  base = _status_mb("VmRSS")
  config = scann.ScannConfig(**{k: v for k, v in vars(args).items() if k != "num_tokens"})
  searcher, built = scann.build(lambda: np.array_split(tokens, 4), len(tokens), config)
  after_build = _status_mb("VmHWM") - base
  with tempfile.TemporaryDirectory() as out:
    scann.write(searcher, out)
  print(f"{len(tokens):,} tokens, {built['num_leaves']:,} leaves: peak over the start "
        f"{after_build:.0f} MiB after the build, {_status_mb('VmHWM') - base:.0f} MiB after "
        "serializing")


if __name__ == "__main__":
  main()
