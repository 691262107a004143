"""The PNGs of `xtr-analyze-alignment`: exact-match rates against IDF (Wu et al., 2024, Figures
2–3), normalized singular-value spectra of the alignments (§7.4), and a case study's token
scores S and alignments A (§7.5). Inputs are the JSON results of `measure.analyze`."""
from typing import Any
from typing import Sequence

import matplotlib
import numpy as np

from xtr import io
from xtr.analysis import directions

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position


def _save(figure: Any, path: str) -> None:
  figure.tight_layout()
  with io.atomic_open(path, "wb") as f:
    figure.savefig(f, format="png", dpi=120)
  plt.close(figure)


def term_matching(models: dict[str, dict[str, Any]], path: str,
                  kinds: Sequence[str] = directions.KINDS, unit: str = "query token") -> None:
  """Each kind's exact-match rate by IDF bin (x: the bin's mean IDF), one colour per model:
  solid over all candidates, dashed over the candidates that contain the token.

  models: {label: its "term_matching" result (or "document_token_term_matching", with the
  d→q kinds and unit "document token": the GR paper's Figure 3)}.
  """
  figure, axes = plt.subplots(
      len(kinds) // 2, 2, figsize=(13, 4.5 * (len(kinds) // 2)), sharex=True, sharey=True,
      squeeze=False)
  for ax, kind in zip(axes.flat, kinds):
    for colour, (label, result) in enumerate(models.items()):
      for subset, style in (("candidates", "-"), ("containing", "--")):
        bins = result[subset]["bins"]
        ax.plot([b["idf_mean"] for b in bins],
                [np.nan if b[kind] is None else b[kind] for b in bins], style, marker="o",
                markersize=3, color=f"C{colour}", label=f"{label} ({subset})")
    ax.set_title(f"{kind} alignment, per {unit}")
    ax.set_xlabel(f"{unit} IDF (mean of an equal-count bin)")
    ax.set_ylabel("exact-match rate")
    ax.grid(alpha=0.3)
  axes.flat[-1].legend(fontsize=6, loc="center left", bbox_to_anchor=(1.02, 0.5))
  _save(figure, path)


def spectra(models: dict[str, dict[str, Any]], path: str) -> None:
  """The mean normalized spectrum of each direction's alignment, one curve per model.

  models: {label: its "low_rank" result}.
  """
  names = sorted({name for result in models.values() for name in result})
  figure, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
  for ax, name in zip(axes[0], names):
    for label, result in models.items():
      if name in result:
        sigma = result[name]["spectrum"]
        ax.plot(np.arange(1,
                          len(sigma) + 1), sigma, marker=".",
                label=f"{label} (rank-1 error {result[name]['rank1_error']:.3f})")
    ax.set_yscale("log")
    ax.set_title(f"{name} alignment: singular values")
    ax.set_xlabel("k")
    ax.set_ylabel("σ_k / ‖A‖_F (mean over pairs)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  _save(figure, path)


def case_study(panels: Sequence[tuple[str, np.ndarray, list[str], list[str]]], path: str) -> None:
  """Heatmaps, one above the other, of (title, matrix [n, m] over one query's and one
  document's valid tokens, the n query token strings, the m document token strings) each."""
  width = max(len(doc) for _, _, _, doc in panels)
  height = sum(0.16 * len(query) + 1.4 for _, _, query, _ in panels)
  figure, axes = plt.subplots(len(panels), 1, squeeze=False,
                              figsize=(max(6.0, 0.13 * width + 2), height))
  for ax, (title, matrix, query, doc) in zip(axes[:, 0], panels):
    image = ax.imshow(matrix, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_title(title, fontsize=9)
    ax.set_yticks(range(len(query)), query, fontsize=6)
    ax.set_xticks(range(len(doc)), doc, fontsize=5, rotation=90)
    figure.colorbar(image, ax=ax, fraction=0.02, pad=0.01)
  _save(figure, path)
