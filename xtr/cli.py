"""What the command-line tools share: gin flags, search flags, opening an encoder and index.

The tools take their model and settings from gin (`--gin_file`, `--gin_bindings`); gin paths are
relative to the current directory or to the repository root, so run files
`include 'gin/models/t5_1_1_base.gin'` and work from anywhere.
"""
import pathlib
from typing import Callable, Sequence

import gin
from absl import flags
from absl import logging

from xtr import encoding
from xtr import index as index_lib
from xtr import retrieval

REPO_DIR = pathlib.Path(__file__).resolve().parents[1]

GIN_FILES = flags.DEFINE_multi_string("gin_file", [], "Gin config files, in order.")
GIN_BINDINGS = flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings, after the files.")


# Inference tools encode with the model and vocabulary that the model gin files define.
ENCODER_BINDINGS = ("xtr.encoding.Encoder.model = %MODEL",
                    "xtr.encoding.Encoder.vocabulary = %VOCABULARY")


def parse_gin(base_config: str = "", extra_bindings: Sequence[str] = ()) -> None:
  """Parses `base_config` (e.g. an index's stored config), --gin_file, --gin_bindings, extras."""
  gin.add_config_file_search_path(str(REPO_DIR))
  if base_config:
    gin.parse_config(base_config)
  gin.parse_config_files_and_bindings(GIN_FILES.value, [*GIN_BINDINGS.value, *extra_bindings])


def open_for_search(index_path: str, checkpoint: str) -> tuple[encoding.Encoder,
                                                                  index_lib.TokenIndex]:
  """The token index at `index_path` and the query encoder of `checkpoint`.

  The model and vocabulary come from the gin config stored in the index (then --gin_file and
  --gin_bindings). Refuses a checkpoint or token dim that differs from the index's.
  """
  token_index = index_lib.open_index(index_path)
  parse_gin(token_index.manifest["model"]["gin_config"], ENCODER_BINDINGS)
  encoder = encoding.Encoder(encoding.load_params(checkpoint))
  index_lib.check_compatible(token_index.manifest, encoder.dim, encoder.fingerprint)
  return encoder, token_index


def quiet_logging() -> None:
  """Orbax and seqio log at INFO on every save and load; --verbosity=0 shows them again."""
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)


def check_no_arguments(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise flags.ValidationError(f"Unexpected arguments: {argv[1:]}")


def define_search_flags() -> Callable[[], retrieval.SearchConfig]:
  """Defines the flags of `retrieval.SearchConfig`; returns a function that reads them."""
  defaults = retrieval.SearchConfig()
  top_k = flags.DEFINE_integer("top_k", defaults.top_k, "Documents returned per query.")
  k_prime = flags.DEFINE_integer("k_prime", defaults.k_prime,
                                 "Document tokens retrieved per query token (k').")
  scoring = flags.DEFINE_enum("scoring", defaults.scoring, retrieval.SCORINGS,
                              "xtr: f_XTR' from retrieved tokens only; colbert: ColBERT's "
                              "three stages; exact: MaxSim over the whole corpus.")
  impute = flags.DEFINE_string("impute", defaults.impute,
                               "f_XTR' imputation: top_k_prime, zero, none, or a number.")
  searcher = flags.DEFINE_enum("searcher", defaults.searcher, ("scann", "bruteforce"),
                               "Token retrieval: the ScaNN index or exact brute force.")

  def read() -> retrieval.SearchConfig:
    impute_value = impute.value
    if impute_value not in ("top_k_prime", "zero", "none"):
      try:
        impute_value = float(impute_value)
      except ValueError:
        raise flags.ValidationError(
            f"--impute must be top_k_prime, zero, none or a number, not {impute.value!r}"
        ) from None
    return retrieval.SearchConfig(top_k.value, k_prime.value, scoring.value, impute_value,
                                  searcher.value)

  return read
