"""What the command-line tools share: gin flags, search flags, opening an index and its encoder.

The tools take their model and settings from gin (`--gin_file`, `--gin_bindings`); gin paths are
relative to the current directory or to the repository root, so run files
`include 'gin/models/t5_1_1_base.gin'` and work from anywhere.
"""
import ctypes
import os
import pathlib
import sys
from typing import Callable, Mapping, Sequence

import gin
from absl import app
from absl import flags
from absl import logging

from xtr import alignment
from xtr import compilation_cache
from xtr import encoding
from xtr import retrieval
from xtr import searcher
from xtr.index import files
from xtr.index import reader
from xtr.index import verify

REPO_DIR = pathlib.Path(__file__).resolve().parents[1]
_M_ARENA_MAX = -8  # glibc's mallopt parameter.

GIN_FILES = flags.DEFINE_multi_string("gin_file", [], "Gin config files, in order.")
GIN_BINDINGS = flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings, after the files.")


# Inference tools encode with the model and vocabulary that the model gin files define.
ENCODER_BINDINGS = ("xtr.encoding.Encoder.model = %MODEL",
                    "xtr.encoding.Encoder.vocabulary = %VOCABULARY")


def parse_gin(extra_bindings: Sequence[str] = ()) -> None:
  """Parses --gin_file, then --gin_bindings, then `extra_bindings`."""
  gin.add_config_file_search_path(str(REPO_DIR))
  gin.parse_config_files_and_bindings(GIN_FILES.value, [*GIN_BINDINGS.value, *extra_bindings])


def define_index_flags() -> Callable[[str, str], tuple[encoding.Encoder, reader.TokenIndex]]:
  """Defines --verify and --vocabulary; returns `open_for_search(index_path, checkpoint)`."""
  verify_mode = flags.DEFINE_enum(
      "verify", "fast", verify.MODES,
      "Index checks before first use: full (sha256 of every file, on every open), fast (sha256 "
      "of small files on every open, of large ones once and again whenever they change), off "
      "(sizes only).")
  vocabulary = flags.DEFINE_string(
      "vocabulary", None, "A local copy of the index's vocabulary file (sentencepiece model, "
      "tokenizer.json or vocab.txt), where its recorded path does not exist.")

  def open_for_search(index_path: str, checkpoint: str
                      ) -> tuple[encoding.Encoder, reader.TokenIndex]:
    """`searcher.open_for_search` with --verify and --vocabulary, after parsing gin:
    --gin_file and --gin_bindings may set what the manifest does not (e.g.
    `Encoder.batch_size`)."""
    parse_gin()
    return searcher.open_for_search(index_path, checkpoint, verify_mode.value, vocabulary.value)

  return open_for_search


def corpus_matches_index(corpus_path: str, token_index: reader.TokenIndex) -> bool:
  """Whether `corpus_path` is the file the index was exported from; warns on stderr if not."""
  indexed = token_index.manifest["corpus"]
  if files.sha256(corpus_path) == indexed["sha256"]:
    return True
  print(f"Warning: {corpus_path} is not the corpus file that the index at {token_index.path} was "
        f"exported from ({indexed['path']}, sha256 {indexed['sha256'][:12]}...): its documents "
        "may differ from the ones searched.", file=sys.stderr, flush=True)
  return False


def check_index_covers_qrels(doc_ids: Sequence[str], qrels: Mapping[str, Mapping[str, int]],
                             index_path: str) -> None:
  """Refuses an index that lacks judged documents (e.g. exported from another corpus)."""
  indexed = set(doc_ids)
  missing = sorted({d for docs in qrels.values() for d in docs} - indexed)
  if missing:
    raise ValueError(f"The index at {index_path} lacks {len(missing)} judged documents (e.g. "
                     f"{missing[:3]}): was it exported from this dataset's corpus.jsonl?")


def quiet_logging() -> None:
  """Orbax and seqio log at INFO on every save and load; --verbosity=0 shows them again."""
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)


def run(main: Callable[[Sequence[str]], None], module_name: str,
        required: Sequence[str] = ()) -> None:
  """`app.run(main)` for the console script of the tool module `module_name`.

  absl's --help lists the flags of `__main__` (none, in a console script) and exits 1. Here
  --help (also -h, -? and --helpshort) prints the tool's docstring and its own flags with their
  defaults, and exits 0; --helpfull still lists every flag of every library.
  """
  if any(arg in ("--help", "-help", "--helpshort", "-h", "-?") for arg in sys.argv[1:]):
    print(sys.modules[module_name].__doc__.strip() + "\n")
    flags_module = sys.argv[0] if module_name == "__main__" else module_name  # python -m ...
    print("\n".join(flags.FLAGS.module_help(name) for name in (flags_module, __name__)))
    print("\n--helpfull lists the flags of every library too.")
    sys.exit(0)
  flags.mark_flags_as_required(required)
  _fewer_malloc_arenas()
  app.run(compilation_cache.using_cache(main))


def _fewer_malloc_arenas() -> None:
  """Two malloc arenas, not glibc's default of up to 8 per core: each of XLA's and ScaNN's
  threads that allocates gets an arena of its own, where freed memory stays. An XTR search of
  SciFact peaked at 609 MiB with the default, 538 MiB with 2 (docs/performance.md); the same as
  MALLOC_ARENA_MAX=2 in the environment. Nothing where libc is not glibc."""
  try:
    ctypes.CDLL("libc.so.6").mallopt(_M_ARENA_MAX, 2)
  except (OSError, AttributeError):
    pass


def check_output_file(flag: str, path: str | None) -> None:
  """Refuses --flag=path, before any work, if it is a directory or its directory is missing."""
  if path in (None, "-"):
    return
  if os.path.isdir(path):
    raise app.UsageError(f"--{flag}={path} is a directory; give the path of a file to write.")
  parent = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(parent):
    raise app.UsageError(f"--{flag}={path}: the directory {parent} does not exist.")


def check_no_arguments(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise flags.ValidationError(f"Unexpected arguments: {argv[1:]}")


def define_search_flags(scoring_only: str | None = None
                        ) -> Callable[[], retrieval.SearchConfig]:
  """Defines the flags of `retrieval.SearchConfig`; returns a function that reads them.

  Args:
    scoring_only: a tool that scores one way only (e.g. "aligner") gets no --scoring and no
      --impute flag.
  """
  defaults = retrieval.SearchConfig()
  top_k = flags.DEFINE_integer("top_k", defaults.top_k, "Documents returned per query.")
  k_prime = flags.DEFINE_integer("k_prime", defaults.k_prime,
                                 "Document tokens retrieved per query token (k').")
  if scoring_only is None:
    scoring = flags.DEFINE_enum("scoring", defaults.scoring, retrieval.SCORINGS,
                                "xtr: f_XTR' from retrieved tokens only; colbert: ColBERT's "
                                "three stages; aligner: ALIGNER's refinement (--alignment, "
                                "saliences); exact: MaxSim over the whole corpus.")
    impute = flags.DEFINE_string("impute", defaults.impute,
                                 "f_XTR' imputation: top_k_prime, zero, none, or a number.")
  alignment_text = flags.DEFINE_string(
      "alignment", str(defaults.alignment), "The sparse alignment of --scoring=aligner: top_k:K, "
      "top_p:P (P a fraction of the document's length, e.g. 0.015) or differentiable:K.")
  prune_query = flags.DEFINE_float(
      "prune_query", None, "β_q in (0, 1]: only the ⌈β_q·n⌉ most salient query tokens retrieve "
      "tokens (a model with salience heads). Default: all of them.")
  searcher = flags.DEFINE_enum("searcher", defaults.searcher, ("scann", "bruteforce"),
                               "Token retrieval: the ScaNN index or exact brute force.")
  leaves_to_search = flags.DEFINE_integer(
      "leaves_to_search", None, "ScaNN partitions searched per query token (default: the "
      "index's, as built; more is slower and closer to exact).", lower_bound=1)
  threads = flags.DEFINE_integer(
      "threads", defaults.threads, "CPU threads of token retrieval and scoring: 1 answers one "
      "query at a time; more answers --scoring=xtr queries in batches (throughput).",
      lower_bound=1)

  def read() -> retrieval.SearchConfig:
    impute_value = defaults.impute if scoring_only else impute.value
    if impute_value not in ("top_k_prime", "zero", "none"):
      try:
        impute_value = float(impute_value)
      except ValueError:
        raise flags.ValidationError(
            f"--impute must be top_k_prime, zero, none or a number, not {impute.value!r}"
        ) from None
    try:
      parsed = alignment.Alignment.parse(alignment_text.value)
    except ValueError as e:
      raise flags.ValidationError(f"--alignment={alignment_text.value}: {e}") from None
    if prune_query.value is not None and not 0 < prune_query.value <= 1:
      raise flags.ValidationError(f"--prune_query={prune_query.value} is not in (0, 1].")
    return retrieval.SearchConfig(top_k.value, k_prime.value, scoring_only or scoring.value,
                                  impute_value, searcher.value, parsed, prune_query.value,
                                  leaves_to_search.value, threads.value)

  return read
