"""What the command-line tools share: gin flags, search flags, opening an index and its encoder.

The tools take their model and settings from gin (`--gin_file`, `--gin_bindings`); gin paths are
relative to the current directory or to the repository root, so run files
`include 'gin/models/t5_1_1_base.gin'` and work from anywhere.
"""
import ctypes
import logging as std_logging
import math
import os
import pathlib
import re
import stat
import sys
import textwrap
import tokenize
import traceback
from typing import Callable
from typing import Mapping
from typing import NoReturn
from typing import Sequence

from absl import app
from absl import flags
from absl import logging
import gin
import jax

from xtr import io
from xtr.cli import compilation_cache
from xtr.evaluation import beir_eval
from xtr.evaluation import run_record
from xtr.index import reader
from xtr.index import verify
from xtr.models import encoding
from xtr.models import released
from xtr.retrieval import ranker
from xtr.retrieval import searcher
from xtr.scoring import alignment
from xtr.scoring import registry

REPO_DIR = pathlib.Path(__file__).resolve().parents[1]
_M_ARENA_MAX = -8  # glibc's mallopt parameter.
MAX_COUNT = 2**31 - 1  # The bound of count flags: what numpy, JAX and ScaNN index with int32.
REFUSED = 2  # The exit status of a refusal (the usage-error convention).
# What xtr raises to refuse input (a flag, a file, a damaged index, a full disk); anything else
# is a bug, whose traceback is kept.
REFUSALS = (ValueError, OSError, app.UsageError, flags.Error)
EXIT_STATUS = (
    "Exit status: 0 done; 2 refused (a bad flag or input file, a damaged index or checkpoint, a "
    "full disk): one line on stderr says what, which flag or file, and what to do, and "
    "--traceback adds the Python traceback; 1 a bug in xtr, with its traceback.")

GIN_FILES = flags.DEFINE_multi_string("gin_file", [], "Gin config files, in order.")
GIN_BINDINGS = flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings, after the files.")
TRACEBACK = flags.DEFINE_bool(
    "traceback", False, "Print the Python traceback of a refusal too (exit status 2), and keep "
    "the log lines of TensorFlow, JAX and orbax on stderr (as --verbosity=0 does).")

# Inference tools encode with the model and vocabulary that the model gin files define.
ENCODER_BINDINGS = ("xtr.models.encoding.Encoder.model = %MODEL",
                    "xtr.models.encoding.Encoder.vocabulary = %VOCABULARY")


def parse_gin(extra_bindings: Sequence[str] = ()) -> None:
  """Parses --gin_file, then --gin_bindings, then `extra_bindings`; a ValueError names what gin
  cannot parse, and the file and line or the binding of a statement that gin cannot carry out
  (a module that is not there, a name no import provides)."""
  gin.add_config_file_search_path(str(REPO_DIR))
  try:
    gin.parse_config_files_and_bindings(GIN_FILES.value, [*GIN_BINDINGS.value, *extra_bindings])
  except (SyntaxError, tokenize.TokenError) as e:
    where = getattr(e, "filename", None) or "a file of --gin_file or --gin_bindings"
    raise ValueError(f"gin cannot parse {where}: {e}") from None
  except (ImportError, NameError, AttributeError) as e:
    if not isinstance(e, ImportError) and not _raised_by_gin(e):
      raise  # A bug in a module that a gin statement imports.
    raise ValueError(_gin_statement_error(e)) from None


# The lines that gin appends to an error raised by a statement: its file and line, or its line
# in the bindings (all joined into one string), then the statement and maybe a caret under it.
_GIN_LOCATION = re.compile(r'\n  In (?:file "(?P<file>.*)", line (?P<line>\d+)|bindings string '
                           r"line \d+)\n    (?P<statement>[^\n]*)")


def _raised_by_gin(error: BaseException) -> bool:
  """Whether gin's own code raised `error` (not code that a statement ran)."""
  frames = traceback.extract_tb(error.__traceback__)
  return bool(frames) and pathlib.Path(frames[-1].filename).parent == pathlib.Path(
      gin.__file__).parent


def _gin_statement_error(error: BaseException) -> str:
  """What a gin statement that raised `error` is, where (the file and line, or the binding), and
  what to do."""
  message = str(error)
  location = _GIN_LOCATION.search(message)
  what = message[:location.start()] if location else message
  what = what.strip().rstrip(".")
  if location is None:
    where = "a statement of --gin_file or --gin_bindings"
  elif location["file"] is not None:
    where = f"{location['file']}:{location['line']} ({location['statement'].strip()})"
  else:
    where = f"--gin_bindings={location['statement'].strip()!r}"
  if isinstance(error, ImportError):
    hint = "is the module's name right, and is it installed?"
  elif isinstance(error, NameError):
    hint = "import the name's module first (e.g. `from xtr.training import trainer`)."
  else:
    hint = "check the name."
  return f"gin cannot carry out {where}: {what}; {hint}"


class IndexFlags:
  """Defines --index and --checkpoint of a tool that searches, and --verify and --vocabulary
  with which `open` opens them."""

  def __init__(self, index_help: str = "Token index of the dataset's corpus (xtr-export --out)."):
    self.index = flags.DEFINE_string("index", None, index_help)
    self.checkpoint = flags.DEFINE_string(
        "checkpoint", None, "The checkpoint the index was built with (an xtr-train checkpoint "
        "or a directory of the released XTR weights).")
    self._verify = flags.DEFINE_enum(
        "verify", "fast", verify.MODES,
        "Index checks before first use: full (sha256 of every file, on every open), fast (sha256 "
        "of small files on every open, of large ones once and again whenever they change), off "
        "(sizes only).")
    self._vocabulary = flags.DEFINE_string(
        "vocabulary", None, "A local copy of the index's vocabulary file (sentencepiece model, "
        "tokenizer.json or vocab.txt), where its recorded path does not exist.")

  def open(self, token_searcher: str = "scann",
           scann_helper: bool = False) -> tuple[encoding.Encoder, reader.TokenIndex]:
    """`searcher.open_for_search` of --index and --checkpoint for `token_searcher`, after
    parsing gin: --gin_file and --gin_bindings may set what the manifest does not (e.g.
    `Encoder.batch_size`)."""
    parse_gin()
    return searcher.open_for_search(self.index.value, self.checkpoint.value, self._verify.value,
                                    self._vocabulary.value, token_searcher, scann_helper)


class MultihostFlags:
  """--multihost and the cluster flags of `jax.distributed.initialize` (one process per host)."""

  def __init__(self):
    self.multihost = flags.DEFINE_bool("multihost", False,
                                       "Call jax.distributed.initialize() (one process per host).")
    self.coordinator_address = flags.DEFINE_string(
        "coordinator_address", None, "With --multihost: host:port of process 0 (default: "
        "detected).")
    self.num_processes = define_count("num_processes", None,
                                      "With --multihost: number of processes (default: detected).")
    self.process_id = define_count(
        "process_id", None, "With --multihost: this process's index, in [0, --num_processes) "
        "(default: detected).", lower_bound=0)
    flags.register_multi_flags_validator(
        ["process_id", "num_processes"],
        lambda v: None in v.values() or v["process_id"] < v["num_processes"],
        message="--process_id must be less than --num_processes (processes count from 0).")

  def initialize(self, shutdown_timeout_s: int = 300) -> bool:
    """Joins the cluster with --multihost (True); refuses cluster flags without it. At exit each
    process waits up to `shutdown_timeout_s` (JAX's default: 300) for the others, then JAX aborts
    them all: a tool whose processes finish far apart (`xtr-export`) passes more."""
    cluster = {
        "coordinator_address": self.coordinator_address.value,
        "num_processes": self.num_processes.value,
        "process_id": self.process_id.value
    }
    if not self.multihost.value:
      if any(value is not None for value in cluster.values()):
        raise app.UsageError("--coordinator_address, --num_processes and --process_id need "
                             "--multihost.")
      return False
    jax.distributed.initialize(**cluster, shutdown_timeout_seconds=shutdown_timeout_s)
    return True


class SplitFlags:
  """Defines --data_dir and --split of a tool that reads a BEIR split (`split_help` says what
  the split is for), which `load` reads."""

  def __init__(self, split_help: str):
    self.data_dir = flags.DEFINE_string("data_dir", None, "BEIR-layout dataset directory.")
    self.split = flags.DEFINE_string("split", "test", split_help)

  def load(self) -> beir_eval.BeirData:
    """The split's queries, qrels and corpus (`beir_eval.load_beir`)."""
    return beir_eval.load_beir(self.data_dir.value, self.split.value)


def corpus_matches_index(corpus_path: str, token_index: reader.TokenIndex) -> bool:
  """Whether `corpus_path` is the file the index was exported from; warns on stderr if not."""
  indexed = token_index.manifest["corpus"]
  if io.sha256(corpus_path) == indexed["sha256"]:
    return True
  print(
      f"Warning: {corpus_path} is not the corpus file that the index at {token_index.path} was "
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
  """Third-party log lines off stderr unless --verbosity or --traceback is given: orbax's records
  (a restore warns that _CHECKPOINT_METADATA is missing, saves log at INFO), seqio's INFO and
  WARNING records, and JAX's warning that it falls back to the CPU. xtr's own warnings stay.
  (TensorFlow's C++ lines are silenced at `import xtr`, before TensorFlow is imported.)"""
  if flags.FLAGS["verbosity"].present or TRACEBACK.value:
    return
  logging.set_verbosity(logging.WARNING)
  logging.get_absl_handler().addFilter(_not_third_party_chatter)
  std_logging.getLogger("jax._src.xla_bridge").setLevel(std_logging.ERROR)


def _not_third_party_chatter(record: std_logging.LogRecord) -> bool:
  """Whether a log record is kept: anything but a seqio record below ERROR or an orbax record
  (orbax logs the error of an asynchronous save, with its traceback, from the thread that
  failed; the trainer re-raises it, naming the checkpoint, where it waits for the save)."""
  if re.search(r"[/\\]orbax[/\\]", record.pathname):
    return False
  seqio = re.search(r"[/\\]seqio[/\\]", record.pathname)
  return not seqio or record.levelno >= std_logging.ERROR


def run(main: Callable[[Sequence[str]], None], module_name: str,
        required: Sequence[str] = ()) -> None:
  """`app.run(main)` for the console script of the tool module `module_name`, with xtr's
  refusals (`REFUSALS`, flag errors included) printed as one line on stderr, exit status 2.

  absl's --help lists the flags of `__main__` (none, in a console script) and exits 1. Here
  --help (also -h, -? and --helpshort) prints the tool's docstring, its own flags with their
  defaults and `EXIT_STATUS`, and exits 0; --helpfull still lists every flag of every library.
  """
  if any(arg in ("--help", "-help", "--helpshort", "-h", "-?") for arg in sys.argv[1:]):
    print(sys.modules[module_name].__doc__.strip() + "\n")
    flags_module = sys.argv[0] if module_name == "__main__" else module_name  # python -m ...
    print("\n".join(flags.FLAGS.module_help(name) for name in (flags_module, __name__)))
    print("\n--helpfull lists the flags of every library too.\n")
    print(textwrap.fill(EXIT_STATUS, 80))
    sys.exit(0)
  flags.mark_flags_as_required(required)
  for name in required:  # An empty path was the current directory, or failed naming no flag.
    flags.register_validator(name, lambda value: value != "", f"--{name} is empty.")
  _fewer_malloc_arenas()
  app.run(refusing(compilation_cache.using_cache(main)), flags_parser=_parse_flags)


def _parse_flags(argv: Sequence[str]) -> Sequence[str]:
  """absl's parsing of `argv`, a bad flag refused in one line."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    refuse(error, hint=" (--help lists the flags)")


def refusing(main: Callable[[Sequence[str]], None]) -> Callable[[Sequence[str]], None]:
  """`main` with third-party logs quieted and its refusals (`REFUSALS`) printed by `refuse`
  (after their traceback, with --traceback); other exceptions propagate (exit status 1)."""

  def refusing_main(argv: Sequence[str]) -> None:
    run_record.mark_start()
    quiet_logging()
    try:
      main(argv)
    except REFUSALS as error:
      if TRACEBACK.value:
        traceback.print_exc()
      refuse(error)

  return refusing_main


def refuse(error: BaseException, hint: str = "") -> NoReturn:
  """Prints `refusal_line(error)` and `hint` on stderr and exits with status `REFUSED`."""
  print(refusal_line(error) + hint, file=sys.stderr, flush=True)
  sys.exit(REFUSED)


def refusal_line(error: BaseException) -> str:
  """`program: message` on one line (a message's line breaks become spaces, and the lines gin
  appends to an error raised inside a configurable, "In call to configurable ...", are dropped)."""
  message = re.sub(r"\n  In call to configurable [^\n]*", "", str(error))
  message = re.sub(r"\s*\n\s*", " ", message.strip()) or type(error).__name__
  return f"{os.path.basename(sys.argv[0])}: {message}"


def _fewer_malloc_arenas() -> None:
  """Two malloc arenas, not glibc's default of up to 8 per core: each of XLA's and ScaNN's
  threads that allocates gets an arena of its own, where freed memory stays. An XTR search of
  SciFact peaked at 609 MiB with the default, 538 MiB with 2 (docs/performance.md); the same as
  MALLOC_ARENA_MAX=2 in the environment. Nothing where libc is not glibc."""
  try:
    ctypes.CDLL("libc.so.6").mallopt(_M_ARENA_MAX, 2)
  except (OSError, AttributeError):
    pass


def check_output_files(**paths: str | None) -> None:
  """Refuses each --flag=path (None: not given), before any work, if it is a directory or its
  directory is missing (`-` is stdout), and two flags that name one file."""
  given = {}
  for flag, path in paths.items():
    check_output_file(flag, path)
    if path is not None:
      name = path if path == "-" else os.path.realpath(path)
      if name in given:
        raise app.UsageError(f"--{flag}={path} names the file of --{given[name]}: each output "
                             "needs its own.")
      given[name] = flag


# The tools' input files: an output is never written over one of them.
_INPUT_FILES = ("queries", "vocabulary", "compare")


def check_output_file(flag: str, path: str | None) -> None:
  """Refuses --flag=path, before any work, if it is a directory, its directory is missing, or
  it would write over an input (`_reads`): a report over the qrels, or over an index's
  manifest, destroyed them."""
  if path in (None, "-"):
    return
  if not path:
    raise app.UsageError(f"--{flag} is empty; give the path of a file to write (- for stdout).")
  if os.path.isdir(path):
    raise app.UsageError(f"--{flag}={path} is a directory; give the path of a file to write.")
  parent = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(parent):
    raise app.UsageError(f"--{flag}={path}: the directory {parent} does not exist.")
  target = os.path.realpath(path)
  for name in _INPUT_FILES + ("index", "checkpoint", "data_dir"):
    given = flags.FLAGS[name].value if name in flags.FLAGS else None
    for value in given if isinstance(given, list) else [given]:
      if value and value != "-" and not io.is_remote(value) and _reads(
          name, os.path.realpath(value), target):
        raise app.UsageError(f"--{flag}={path} would write over what --{name}={value} holds: "
                             "write it elsewhere.")


_RUN_DIRS = ("checkpoints", "initial")  # An xtr-train run's steps; its θ_0 (INITIAL_PARAMS).


def _reads(name: str, source: str, target: str) -> bool:
  """Whether the input --name (at `source`) is or holds `target`: the file itself, anything in an
  index, a checkpoint's steps, initial parameters or released-layout files, a BEIR directory's
  corpus, queries or qrels (reports beside them are fine)."""
  if target == source:
    return True
  relative = os.path.relpath(target, source)
  first = relative.split(os.sep)[0]
  if first == os.pardir or name in _INPUT_FILES:
    return False
  if name == "checkpoint":
    return (first in _RUN_DIRS or
            relative in released.FILES + released.BERT_FILES + ("tokenizer.json",))
  if name == "data_dir":
    return first == "qrels" or first.startswith(("corpus.", "queries."))
  return True  # An index: every file in it is one.


def check_outside_run(out: str, checkpoint: str) -> None:
  """Refuses --out=out in the checkpoints of the xtr-train run at --checkpoint (its model dir or
  one of its step dirs), or the run's dir itself: there it became the run's latest step (or its
  θ_0), and neither could a tool load the run nor xtr-train resume it."""
  run, target = os.path.realpath(checkpoint), os.path.realpath(out)
  if os.path.basename(os.path.dirname(run)) == "checkpoints":  # A step dir.
    run = os.path.dirname(os.path.dirname(run))
  for inner in (os.path.join(run, name) for name in _RUN_DIRS):
    if target in (run, inner) or target.startswith(os.path.join(inner, "")):
      raise app.UsageError(f"--out={out} lies in the checkpoints of --checkpoint={checkpoint}, "
                           "where it would become one of them; choose a directory outside them.")


def check_input_file(flag: str, path: str) -> None:
  """Refuses --flag=path, before any work, unless it is a regular file (symlinks followed) or a
  remote one: a corpus is read twice, once for its sha256, which a pipe cannot give."""
  if io.is_remote(path):
    return
  try:
    mode = os.stat(path).st_mode
  except OSError as e:
    raise app.UsageError(f"--{flag}={path}: {e.strerror}.") from None
  if not stat.S_ISREG(mode):
    raise app.UsageError(f"--{flag}={path} is not a regular file: xtr reads it twice (once for "
                         "its sha256, which the index records); write it to a file first.")


def check_no_arguments(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise flags.ValidationError(f"Unexpected arguments: {argv[1:]}")


def define_fraction(name: str, default: float | None, help_text: str,
                    closed: bool = False) -> flags.FlagHolder:
  """A float flag of the calling module in (0, 1] ([0, 1] if `closed`); another value (NaN,
  inf) is refused when the flags are parsed, before any work."""
  interval = "[0, 1]" if closed else "(0, 1]"
  holder = flags.DEFINE_float(name, default, f"{help_text} In {interval}.",
                              module_name=_calling_module())
  flags.register_validator(
      name, lambda value: value is None or (0 <= value if closed else 0 < value) and value <= 1,
      message=f"not a number in {interval}")
  return holder


def define_count(name: str, default: int | None, help_text: str,
                 lower_bound: int = 1) -> flags.FlagHolder:
  """An integer flag of the calling module in [lower_bound, MAX_COUNT], refused when the flags
  are parsed otherwise."""
  return flags.DEFINE_integer(name, default, help_text, lower_bound=lower_bound,
                              upper_bound=MAX_COUNT, module_name=_calling_module())


def _calling_module() -> str:
  """The module that called the caller, named as absl names it (`python -m`: by argv[0]), for
  its --help to list the flags it defines through a helper here."""
  name = sys._getframe(2).f_globals["__name__"]  # pylint: disable=protected-access
  return sys.argv[0] if name == "__main__" else name


def define_search_flags(scoring_only: str | None = None) -> Callable[[], ranker.SearchConfig]:
  """Defines the flags of `ranker.SearchConfig`; returns a function that reads them.

  Args:
    scoring_only: a tool that scores one way only (e.g. "aligner") gets no --scoring and no
      --impute flag.
  """
  defaults = ranker.SearchConfig()
  top_k = define_count(
      "top_k", defaults.top_k, "Documents returned per query; more than the "
      "index holds returns them all.")
  k_prime = define_count(
      "k_prime", defaults.k_prime, "Document tokens retrieved per query token "
      "(k'); more than the index's token-retrieval index holds (its "
      "num_indexed_tokens) retrieves them all.")
  if scoring_only is None:
    scoring = flags.DEFINE_enum(
        "scoring", defaults.scoring, registry.names("search"),
        "xtr: f_XTR' from retrieved tokens only; colbert: ColBERT's "
        "three stages; aligner: ALIGNER's refinement (--alignment, "
        "saliences); exhaustive: MaxSim of every document, no token retrieval "
        "(xtr.scoring.registry).")
    impute = flags.DEFINE_string(
        "impute", defaults.impute, "f_XTR' imputation: top_k_prime, zero, none, or a number "
        f"in [-{ranker.MAX_IMPUTE:g}, {ranker.MAX_IMPUTE:g}].")
  alignment_text = flags.DEFINE_string(
      "alignment", str(defaults.alignment), "The sparse alignment of --scoring=aligner: top_k:K, "
      "top_p:P (P a fraction of the document's length, e.g. 0.015) or differentiable:K.")
  prune_query = define_fraction(
      "prune_query", None, "β_q: only the ⌈β_q·n⌉ most salient query tokens retrieve tokens (a "
      "model with salience heads). Default: all of them.")
  searcher = flags.DEFINE_enum(
      "searcher", defaults.searcher, reader.SEARCHERS,
      "Token retrieval: the ScaNN index; exact brute force streamed from the host; or the "
      "stored vectors resident on the accelerator (device; settings in gin: "
      "device.DeviceConfig.dtype, .recall_target).")
  leaves_to_search = define_count(
      "leaves_to_search", None, "ScaNN partitions searched per query token (default: the "
      "index's, as built; more is slower and closer to exact; more than the index has searches "
      "them all).")
  threads = flags.DEFINE_integer(
      "threads", defaults.threads, "CPU threads of token retrieval and scoring: 1 answers one "
      "query at a time; more answers --scoring=xtr queries in batches (throughput). At most the "
      f"CPU cores ({os.cpu_count()} here).", lower_bound=1, upper_bound=os.cpu_count())

  def read() -> ranker.SearchConfig:
    impute_value = defaults.impute if scoring_only else _impute(impute.value)
    try:
      parsed = alignment.Alignment.parse(alignment_text.value)
    except ValueError as e:
      raise flags.ValidationError(f"--alignment={alignment_text.value}: {e}") from None
    config = ranker.SearchConfig(top_k.value, k_prime.value, scoring_only or scoring.value,
                                 impute_value, searcher.value, parsed, prune_query.value,
                                 leaves_to_search.value, threads.value)
    _warn_of_unread_flags(config)
    return config

  return read


def _warn_of_unread_flags(config: ranker.SearchConfig) -> None:
  """Warns on stderr of each search flag given that `config`'s scoring and searcher do not
  read (the results JSON records the settings whatever they are)."""
  retrieves = registry.SCORINGS[config.scoring].retrieves
  unread = {
      "k_prime": not retrieves,
      "searcher": not retrieves,
      "prune_query": not retrieves,
      "leaves_to_search": not retrieves or config.searcher != "scann",
      "impute": config.scoring != "xtr",
      "alignment": config.scoring != "aligner",
  }
  given = [
      name for name, ignored in unread.items()
      if ignored and name in flags.FLAGS and flags.FLAGS[name].present
  ]
  for name in given:
    print(
        f"Warning: --{name}={flags.FLAGS[name].value} has no effect with "
        f"--scoring={config.scoring} --searcher={config.searcher}.", file=sys.stderr, flush=True)


def _impute(text: str) -> str | float:
  """The value of --impute: a name, or a number within `ranker.MAX_IMPUTE`."""
  if text in ("top_k_prime", "zero", "none"):
    return text
  try:
    value = float(text)
  except ValueError:
    value = math.nan
  if not abs(value) <= ranker.MAX_IMPUTE:
    raise flags.ValidationError(f"--impute={text}: give top_k_prime, zero, none or a number in "
                                f"[-{ranker.MAX_IMPUTE:g}, {ranker.MAX_IMPUTE:g}].")
  return value
