"""The instruments of "Generative Retrieval as Multi-Vector Dense Retrieval" (Wu et al., 2024):
relevance = Σ S ⊙ A, with S_ij = q_i·d_j and A an alignment, measured on trained checkpoints.

  directions     A of the query-to-document and document-to-query directions, and their scores
  term_matching  exact-match rates of alignments, IDF and equal-count IDF bins
  low_rank       singular-value spectra of alignments and their rank-1 error
  measure        the rerank candidates, one model's token vectors, and every statistic over a split
  plots          the PNGs: rates against IDF, spectra, and a case study's S and A

The CLI is `xtr.cli.analyze_alignment` (`xtr-analyze-alignment`).
"""
