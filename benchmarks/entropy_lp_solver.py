"""The entropy-LP gate's solver (`top_k.entropy_topk`, ALIGNER eq. 4-5) on realistic inputs,
against the exact solution (bisection in float64), at several ε and update counts.

  .venv/bin/python benchmarks/entropy_lp_solver.py INDEX_DIR [--docs=500] [--out=JSON]

Inputs: the document saliences s of an index exported with a `relu` salience model (u = s there:
the head's outputs after training), and the heads' outputs at initialization (s = 1 + w·v with
w ~ lecun_normal over D dims and unit v: s ~ 1 + N(0, 1/D)), over the same document lengths.
Per setting: max |Σλ − k| (k = ⌈α^d·m⌉), max |λ − λ*| against the exact λ*, the share of
valid tokens whose λ is fractional (0.01 < λ < 0.99: where gradients flow), and the largest
|∂(Σ_i λ_i s_i)/∂s_j| (how steep the gate is: ~1/ε at a fractional token).
"""
import argparse
import shlex
import sys

import jax
import jax.numpy as jnp
import numpy as np

from xtr import io
from xtr.index import reader
from xtr.models import salience
from xtr.models import top_k

jax.config.update("jax_enable_x64", True)


def exact(s: np.ndarray, mask: np.ndarray, k: np.ndarray, epsilon: float) -> np.ndarray:
  """λ* of eq. 4 [N, m]: λ_i = min(1, exp((s_i + a)/ε)) with Σλ = k, a by 200 bisections."""
  lam = np.zeros_like(s)
  for row in range(len(s)):
    valid = s[row][mask[row]]
    total = lambda a, v=valid: np.minimum(1.0, np.exp(np.minimum((v + a) / epsilon, 0))).sum()
    low, high = -valid.max() - 50 * epsilon - 10, -valid.min()  # Σλ ≈ 0 there, = m here.
    for _ in range(200):
      middle = (low + high) / 2
      low, high = (middle, high) if total(middle) < k[row] else (low, middle)
    lam[row][mask[row]] = np.minimum(1.0, np.exp(np.minimum((valid + high) / epsilon, 0)))
  return lam


def measure(s: np.ndarray, mask: np.ndarray, alpha: float, epsilon: float, num_iters: int) -> dict:
  k = np.asarray(salience.budget(alpha, mask.sum(1)), np.float64)
  solve = lambda x: top_k.entropy_topk(x, mask, k, epsilon, num_iters)
  lam = np.asarray(solve(jnp.asarray(s, jnp.float32)), np.float64)
  grad = jax.grad(lambda x: jnp.sum(solve(x) * x))(jnp.asarray(s, jnp.float32))
  reference = exact(s, mask, k, epsilon)
  return {
      "epsilon": epsilon,
      "num_iters": num_iters,
      "max_budget_error": float(np.abs(lam.sum(1) - k).max()),
      "mean_budget_error": float(np.abs(lam.sum(1) - k).mean()),
      "max_lambda_error": float(np.abs(lam - reference).max()),
      "fractional_share": float(((lam > 0.01) & (lam < 0.99))[mask].mean()),
      "max_gradient": float(np.abs(np.asarray(grad))[mask].max()),
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("index")
  parser.add_argument("--docs", type=int, default=500)
  parser.add_argument("--alpha", type=float, default=0.4)
  parser.add_argument("--out")
  args = parser.parse_args()
  token_index = reader.open_index(args.index)
  saliences = token_index.doc_saliences(range(min(args.docs, token_index.num_docs)))
  length = max(len(u) for u in saliences)
  mask = np.arange(length)[None] < np.array([len(u) for u in saliences])[:, None]
  trained = np.zeros(mask.shape)
  trained[mask] = np.concatenate(saliences)
  rng = np.random.default_rng(0)
  initial = np.where(mask, 1 + rng.normal(0, 1 / np.sqrt(token_index.dim), mask.shape), 0)
  results = {}
  for name, s in (("trained relu heads", trained), ("heads at initialization", initial)):
    spread = np.array([np.std(row[m]) for row, m in zip(s, mask)])
    results[name] = {"median_within_doc_std": float(np.median(spread)), "settings": []}
    print(f"{name}: median std of s within a document {np.median(spread):.4f}")
    for epsilon, num_iters in ((0.002, 100), (0.002, 1000), (0.02, 100), (0.2, 100)):
      row = measure(s, mask, args.alpha, epsilon, num_iters)
      results[name]["settings"].append(row)
      print("  " + ", ".join(f"{k} {v:.3g}" for k, v in row.items()))
  if args.out:
    io.write_results(
        args.out, {
            "command": shlex.join(["benchmarks/entropy_lp_solver.py", *sys.argv[1:]]),
            "index": args.index,
            "docs": len(saliences),
            "alpha": args.alpha,
            **results
        })


if __name__ == "__main__":
  main()
