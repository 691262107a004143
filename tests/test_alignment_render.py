"""xtr.analysis.render (xtr-show-alignment): salient alignments against a loop, word joining,
escaping."""
import numpy as np

from xtr.analysis import render


def test_salient_alignments_match_a_loop():
  rng = np.random.default_rng(0)
  s = rng.normal(size=(7, 11)).round(1)  # rounded: ties in S
  u_q = rng.choice([0.0, 0.5, 1.0], size=7)  # ties in salience
  pairs = render.salient_alignments(s, u_q, 4)
  expected = []
  for i in sorted(range(7), key=lambda i: (-u_q[i], i))[:4]:
    best = 0
    for j in range(11):
      if s[i, j] > s[i, best]:
        best = j
    expected.append((i, best))
  assert pairs == expected


def test_pieces_join_into_words():
  bert = render._words(["[CLS]", "bio", "##material", "##s", "show", "[SEP]"])
  assert bert == [("[CLS]", False), ("bio", True), ("material", False), ("s", False),
                  ("show", True), ("[SEP]", True)]
  t5 = render._words(["\u2581bio", "material", "s", "\u2581show", "</s>"])
  assert t5 == [("bio", False), ("material", False), ("s", False), ("show", True), ("</s>", False)]


def test_rendering_escapes_corpus_text():
  query = {
      "id": "q<1>",
      "pieces": ["a", "<b>"],
      "u": np.array([1.0, 0.5]),
      "kept": np.array([True, False]),
      "beta": 0.5
  }
  doc = {
      "id": "d&",
      "pieces": ["<script>", "x*y_", "a|`b"],
      "u": np.array([0.2, 0.9, 0.1]),
      "kept": np.array([False, True, False]),
      "beta": 0.5
  }
  s = np.array([[0.1, 0.7, 0.0], [0.3, 0.2, 0.9]])
  page = render.render(query, doc, [(0, 1), (1, 2)], s, markdown=False)
  assert "<script>" not in page and "&lt;script&gt;" in page and "q&lt;1&gt;" in page
  assert page.count("<sup") == 4  # each pair's number on both of its tokens
  markdown = render.render(query, doc, [(0, 1), (1, 2)], s, markdown=True)
  assert "&lt;script&gt;" in markdown and r"**x\*y\_<sup>1</sup>**" in markdown
  assert "| 1 | `a` | 1.000 | `x*y_` | 1 | 0.700 | 0.900 |" in markdown
  assert r"| 2 | `<b>` | 0.500 | `` a\|`b `` | 2 | 0.900 | 0.100 |" in markdown
