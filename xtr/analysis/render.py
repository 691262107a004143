"""One query and one document as ALIGNER's Table 4 shows them: salient tokens highlighted, the
most salient query tokens numbered with the document token each aligns to (HTML or Markdown).
The library side of `xtr-show-alignment`; corpus text is escaped."""
import html
from typing import Sequence

import numpy as np

COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2")


def salient_alignments(s: np.ndarray, u_q: np.ndarray, num: int) -> list[tuple[int, int]]:
  """The `num` most salient query tokens and the document token each aligns to (top-1).

  Args:
    s: [n, m] S_ij = q_i·d_j over the valid tokens of one query and one document.
    u_q: [n] query token saliences.

  Returns:
    (i, j) pairs, most salient query token first (ties to the earlier token); j = argmax_j S_ij
    (ties to the earlier document token).
  """
  order = np.argsort(-np.asarray(u_q, np.float64), kind="stable")[:num]
  return [(int(i), int(np.argmax(s[i]))) for i in order]


def _words(pieces: Sequence[str]) -> list[tuple[str, bool]]:
  """Token pieces -> (display text, space before) each: WordPiece "##" and SentencePiece "▁"
  markers become word boundaries."""
  sentencepiece = any(p.startswith("\u2581") for p in pieces)
  out = []
  for k, piece in enumerate(pieces):
    if sentencepiece:
      text, space = piece.removeprefix("\u2581"), piece.startswith("\u2581") or k == 0
    else:
      text, space = piece.removeprefix("##"), not piece.startswith("##")
    out.append((text, space and k > 0))
  return out


def _marks(pairs: Sequence[tuple[int, int]]) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
  """(query token -> pair numbers, document token -> pair numbers), numbers from 1."""
  query, doc = {}, {}
  for number, (i, j) in enumerate(pairs, start=1):
    query.setdefault(i, []).append(number)
    doc.setdefault(j, []).append(number)
  return query, doc


def _html_text(pieces: Sequence[str], kept: np.ndarray, marks: dict[int, list[int]]) -> str:
  spans = []
  for k, (text, space) in enumerate(_words(pieces)):
    style = "background:#ffe58f;" if kept[k] else ""
    sup = ""
    if k in marks:
      colour = COLOURS[(marks[k][0] - 1) % len(COLOURS)]
      style += f"border:2px solid {colour};border-radius:3px;"
      sup = "".join(
          f'<sup style="color:{COLOURS[(n - 1) % len(COLOURS)]}">{n}</sup>' for n in marks[k])
    spans.append((" " if space else "") + f'<span style="{style}">{html.escape(text)}</span>{sup}')
  return "".join(spans)


def _markdown_text(pieces: Sequence[str], kept: np.ndarray, marks: dict[int, list[int]]) -> str:
  out, bold = [], False
  for k, (text, space) in enumerate(_words(pieces)):
    if bold and (space or not kept[k]):  # One bold run per word's kept pieces.
      out.append("**")
      bold = False
    out.append(" " if space else "")
    if kept[k] and not bold:
      out.append("**")
      bold = True
    out.append("".join("\\" + c if c in "\\`*_[]|~" else c for c in html.escape(text, quote=False)))
    out.append("".join(f"<sup>{n}</sup>" for n in marks.get(k, ())))
  return "".join(out) + ("**" if bold else "")


def _code(piece: str) -> str:
  """A token piece as a Markdown code span inside a table cell."""
  piece = piece.replace("|", "\\|")
  return f"`` {piece} ``" if "`" in piece else f"`{piece}`"


def render(query: dict, doc: dict, pairs: Sequence[tuple[int, int]], s: np.ndarray,
           markdown: bool) -> str:
  """The example as HTML or Markdown.

  Args:
    query, doc: {"id", "pieces" [n] or [m], "u" saliences, "kept" bool, "beta"}.
    pairs: `salient_alignments`; s: [n, m] token scores.
  """
  query_marks, doc_marks = _marks(pairs)
  text = _markdown_text if markdown else _html_text
  rows = [(n, query["pieces"][i], query["u"][i], doc["pieces"][j], j, s[i, j], doc["u"][j])
          for n, (i, j) in enumerate(pairs, start=1)]
  header = ("pair", "query token", "u^q", "aligned document token", "position", "S_ij", "u^d")
  legend = (f"Highlighted: the top {query['beta']:.0%} of the query's tokens and the top "
            f"{doc['beta']:.0%} of the document's by salience. Numbered: the {len(pairs)} most "
            "salient query tokens and the document token each aligns to (top-1).")
  if markdown:
    table = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    table += [
        f"| {n} | {_code(q)} | {uq:.3f} | {_code(d)} | {j} | {sij:.3f} | {ud:.3f} |"
        for n, q, uq, d, j, sij, ud in rows
    ]
    return (f"**Query {query['id']}:** {text(query['pieces'], query['kept'], query_marks)}\n\n"
            f"**Document {doc['id']}:** {text(doc['pieces'], doc['kept'], doc_marks)}\n\n"
            f"{legend}\n\n" + "\n".join(table) + "\n")
  cells = lambda values, tag: "".join(f"<{tag}>{html.escape(str(v))}</{tag}>" for v in values)
  body = "".join("<tr>" + cells((n, q, f"{uq:.3f}", d, j, f"{sij:.3f}", f"{ud:.3f}"), "td") +
                 "</tr>" for n, q, uq, d, j, sij, ud in rows)
  return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ALIGNER alignment</title>"
          "</head>\n<body style=\"font-family:sans-serif;max-width:60em;line-height:1.8\">\n"
          f"<p><b>Query {html.escape(query['id'])}:</b> "
          f"{text(query['pieces'], query['kept'], query_marks)}</p>\n"
          f"<p><b>Document {html.escape(doc['id'])}:</b> "
          f"{text(doc['pieces'], doc['kept'], doc_marks)}</p>\n<p>{html.escape(legend)}</p>\n"
          f"<table border=\"1\" cellpadding=\"4\"><tr>{cells(header, 'th')}</tr>{body}</table>\n"
          "</body></html>\n")
