"""Refusals of the command-line tools: one line on stderr and exit status 2 before any work,
a traceback only with --traceback; outputs that are pipes or full disks; clean stderr."""
import contextlib
import errno
import gzip
import io as python_io
import json
import os
import re
import shutil
import subprocess
import sys
import types

import gin
import numpy as np
import pytest

from tests.retrieval_setup import REPO
from tests.retrieval_setup import SLICE_DOCS
from tests.retrieval_setup import random_checkpoint
from tests.retrieval_setup import run_tool
from xtr import cli
from xtr import io
from xtr.data import beir_files
from xtr.evaluation import beir_eval
from xtr.models import encoding

MISSING = "/nonexistent/xtr-test"  # Every path a refusal must come before reading.
_SEARCH = (f"--index={MISSING}/index", f"--checkpoint={MISSING}/model")
_EVAL = (f"--data_dir={MISSING}/data", *_SEARCH, f"--out={MISSING}/out.json")
_CASES = {  # module: (the arguments every case adds, [(flag=value, what stderr must name)])
    "xtr.search_main": (_SEARCH, [
        *[(f"--{flag}={value}", f"--{flag}={value}") for flag in ("top_k", "k_prime")
          for value in (0, -3, 10**10, "1e9", "nan")],
        *[(f"--impute={value}", f"--impute={value}") for value in ("nan", "-inf", "inf", "x")],
        *[(f"--prune_query={value}", f"--prune_query={shown}: not a number in (0, 1]")
          for value, shown in (("nan", "nan"), ("0", "0.0"), ("-1", "-1.0"), ("1.5", "1.5"),
                               ("inf", "inf"))],
        ("--leaves_to_search=0", "--leaves_to_search=0"),
        ("--leaves_to_search=-3", "--leaves_to_search=-3"),
        ("--leaves_to_search=10000000000", "--leaves_to_search=10000000000"),
        ("--threads=0", "--threads=0"),
        ("--threads=1000000000", f"1000000000 is not an integer in the range [1, "
                                 f"{os.cpu_count()}]"),
        ("--no_such_flag", "Unknown command line flag 'no_such_flag'"),
        ("--out=", "--out is empty; give the path of a file to write (- for stdout)."),
        *[(f"--scoring=aligner --alignment={name}:{10**20}",
           f"--alignment={name}:{10**20}: alignment '{name}:{10**20}': {name} alignment needs "
           f"k <= 2,147,483,647") for name in ("top_k", "differentiable")],
    ]),
    "xtr.cli.eval_beir": (_EVAL, [("--k_prime=0", "--k_prime=0"), ("--impute=nan", "--impute=nan"),
                              ("--top_k=-1", "--top_k=-1"), ("--index=", "--index is empty."),
                              ("--top_k=99", "--top_k=99 is below 100, the cutoff of Recall@100, "
                               "which would count 99 documents a query; give --top_k=100 or "
                               "more.")]),
    "xtr.cli.adapt_alignment": (_EVAL, [
        ("--shots=0", "--shots=0"), ("--shots=10000000000", "--shots=10000000000"),
        ("--seed=-1", "--seed=-1: -1 is not an integer in the range [0, "),
        ("--prune_query=nan", "--prune_query=nan"),
        (f"--strategies=top_k:1,top_k:{2**31}", f"--strategies: alignment 'top_k:{2**31}': "
         f"top_k alignment needs k <= 2,147,483,647 (the int32 bound of JAX's top-k), got "
         f"{2**31}")]),
    "xtr.cli.export": ((f"--out={MISSING}/index", f"--checkpoint={MISSING}/model",
                    f"--corpus={MISSING}/corpus.jsonl"), [
        ("--docs_per_chunk=0", "--docs_per_chunk=0"),
        ("--docs_per_chunk=-3", "--docs_per_chunk=-3"),
        ("--docs_per_chunk=10000000000", "--docs_per_chunk=10000000000"),
        ("--num_shards=0", "--num_shards=0"), ("--shard_id=-1", "--shard_id=-1"),
        ("--num_shards=2 --shard_id=2", "shard_id=2, num_shards=2: --shard_id must be less than"),
        *[(f"--prune_doc={value}", f"--prune_doc={shown}: not a number in (0, 1]")
          for value, shown in (("nan", "nan"), ("0", "0.0"), ("1.5", "1.5"), ("-inf", "-inf"))],
    ]),
    "xtr.cli.show_alignment": ((*_EVAL[:-1], "--query_id=1", f"--out={MISSING}/a.html"), [
        ("--beta_q=nan", "--beta_q=nan"), ("--beta_q=0", "--beta_q=0.0"),
        ("--beta_d=inf", "--beta_d=inf"), ("--beta_d=-1", "--beta_d=-1.0"),
        ("--num_aligned=0", "--num_aligned=0"),
        ("--num_aligned=10000000000", "--num_aligned=10000000000")]),
    "xtr.cli.analyze_tokens": (_EVAL, [("--k=0", "--k=0"), ("--k=-3", "--k=-3"),
                                   ("--k=10000000000", "--k=10000000000")]),
    "xtr.cli.wise_ft": ((f"--checkpoint={MISSING}/model", f"--out={MISSING}/wise_ft"), [
        *[(f"--alpha={value}", f"--alpha={shown}: not a number in [0, 1]")
          for value, shown in (("nan", "nan"), ("-0.5", "-0.5"), ("1.5", "1.5"), ("inf", "inf"))],
        ("--checkpoint=", "--checkpoint is empty."),  # It was the current directory.
    ]),
    "xtr.cli.train": ((), [
        ("--num_processes=0", "--num_processes=0"), ("--process_id=-1", "--process_id=-1"),
        ("--num_processes=2 --process_id=2",
         "process_id=2, num_processes=2: --process_id must be less than --num_processes"),
        ("--gin_bindings=trainer.train.num_steps=", "gin cannot parse a file of --gin_file or "
                                                    "--gin_bindings: Unable to parse value."),
        ("--gin_file=gin/runs/smoke.gin --gin_bindings=trainer.train.num_steps='five'",
         "trainer.train.num_steps = 'five': expected int, got str; check its gin binding.")]),
    "xtr.cli.export_model": ((f"--checkpoint={MISSING}/model",), [
        ("--out=.", "--out=. exists; name a new directory."),
        ("--out=", "--out is empty."),  # Refused after the model loaded, naming no flag.
        (f"--out={MISSING}/out --no_such_flag", "Unknown command line flag 'no_such_flag'")]),
    **{module: ((), [("--no_such_flag", "Unknown command line flag 'no_such_flag'")])
       for module in ("xtr.cli.demo", "xtr.cli.analyze_alignment", "xtr.cli.convert_checkpoint")},
}
_PROBE = """
import contextlib, io, json, sys, traceback
from absl import flags
import {module}
results = []
for args in json.loads(sys.argv[1]):
  flags.FLAGS.unparse_flags()
  sys.argv, stderr = ["xtr-tool", *args], io.StringIO()
  with contextlib.redirect_stderr(stderr):
    try:
      {module}.console_entry_point()
      status = 0
    except SystemExit as e:
      status = e.code
    except BaseException:
      status, stderr = "raised", io.StringIO(traceback.format_exc())
  results.append([status, stderr.getvalue()])
print(json.dumps(results))
"""


def _probe(module: str, argvs: list[list[str]]) -> list[tuple[int, str]]:
  """(exit status, stderr) of `module`'s console entry point called with each of `argvs`, in
  one process (flags reset between)."""
  process = subprocess.run(
      [sys.executable, "-c", _PROBE.format(module=module),
       json.dumps(argvs)], capture_output=True, text=True, cwd=REPO, env={
           **os.environ, "XLA_FLAGS": ""
       })
  assert process.returncode == 0, process.stderr[-3000:]
  return [tuple(result) for result in json.loads(process.stdout.splitlines()[-1])]


@pytest.fixture(scope="module")
def refusals() -> dict[tuple[str, str], tuple[int, str]]:
  """{(module, case): (exit status, stderr)} of every case of `_CASES`, each module's cases
  run in one process (its console entry point called once per case, flags reset between)."""
  found = {}
  for module, (common, cases) in _CASES.items():
    results = _probe(module, [[*common, *case.split()] for case, _ in cases])
    found |= {(module, case): result for (case, _), result in zip(cases, results)}
  return found


def test_the_analyses_refuse_their_inputs_before_any_work(exported, scifact_slice, tmp_path,
                                                          t5_spm_path):
  """Before: a traceback (KeyError) after the whole analysis, or a message naming no flag."""
  model_dir, index_dir = exported
  out = (f"--out={tmp_path / 'out.json'}", f"--plot={tmp_path / 'out.png'}")
  (tmp_path / "curves.json").write_text('{"k": 2, "gold": [0.5, 0.5], "lexical": [0.1, 0.1]}')
  (tmp_path /
   "alignment.json").write_text('{"models": {"old": {"term_matching": {}, "low_rank": {}}}}')
  extra = tmp_path / "extra"  # The slice, with a judged document that the index lacks.
  shutil.copytree(scifact_slice, extra)
  with open(extra / "corpus.jsonl", "a") as f:
    f.write('{"_id": "extra1", "title": "", "text": "an unindexed document"}\n')
  qrels = (extra / "qrels" / "test.tsv").read_text()
  query_id = qrels.splitlines()[1].split("\t")[0]
  (extra / "qrels" / "test.tsv").write_text(qrels + f"{query_id}\textra1\t1\n")
  index = (f"--index={index_dir}", f"--checkpoint={model_dir}")
  model = ("--gin_file=gin/models/t5_1_1_tiny.gin", f"--gin_bindings=T5_SPM_PATH = '{t5_spm_path}'")
  cases = {
      "xtr.cli.analyze_tokens": [
          ((f"--data_dir={scifact_slice}", *index, *out, f"--compare={tmp_path / 'curves.json'}"),
           f"--compare={tmp_path / 'curves.json'}: not an --out JSON of xtr-analyze-tokens"),
          ((f"--data_dir={scifact_slice}", *index, out[0], f"--compare={tmp_path / 'curves.json'}"),
           "--compare draws earlier curves into --plot: give --plot too."),
          ((f"--data_dir={scifact_slice}", *index, *out, f"--compare={MISSING}/c.json"),
           f"--compare={MISSING}/c.json"),
          ((f"--data_dir={scifact_slice}", *index, f"--out={MISSING}/o.json"), "--out="),
          ((f"--data_dir={extra}", *index, *out), "lacks 1 judged documents (e.g. ['extra1'])"),
      ],
      "xtr.cli.analyze_alignment": [
          ((*model, f"--data_dir={scifact_slice}", f"--checkpoint={MISSING}/model",
            f"--out={tmp_path / 'analysis'}", f"--compare={tmp_path / 'alignment.json'}"),
           f"--compare={tmp_path / 'alignment.json'}: not an alignment.json"),
          ((*model, f"--data_dir={scifact_slice}", f"--checkpoint={MISSING}/model",
            f"--out={tmp_path / 'analysis'}",
            "--gin_bindings=xtr.analysis.measure.Settings.num_idf_bins = 0"),
           "measure.Settings.num_idf_bins = 0: expected a positive integer"),
      ],
      "xtr.cli.show_alignment": [
          ((f"--data_dir={scifact_slice}", *index, f"--query_id={query_id}", "--doc_id=nope",
            f"--out={tmp_path / 'a.md'}"),
           f"--doc_id=nope is not a document of {scifact_slice / 'corpus.jsonl'}"),
      ],
  }
  for module, module_cases in cases.items():
    # analyze_alignment parses its gin files once per process: one process per case.
    results = ([_probe(module, [list(args)])[0] for args, _ in module_cases]
               if module.endswith("analyze_alignment") else _probe(
                   module, [list(args) for args, _ in module_cases]))
    for (args, named), (status, stderr) in zip(module_cases, results):
      # One line (after a warning that the corpus is not the index's, in the last case).
      assert status == cli.REFUSED and "Traceback" not in stderr, (args, stderr)
      assert stderr.splitlines()[-1].startswith("xtr-tool: ") and named in stderr, (args, stderr)
  assert not any(tmp_path.glob("out.*")) and not (tmp_path / "analysis").exists()


@pytest.mark.parametrize(
    "module, case, named",
    [(module, case, named) for module, (_, cases) in _CASES.items() for case, named in cases])
def test_absurd_flags_are_refused_in_one_line_before_any_work(refusals, module, case, named):
  """The paths are missing: a refusal that names the flag shows that it came first."""
  status, stderr = refusals[(module, case)]
  assert status == cli.REFUSED, stderr
  assert stderr.endswith("\n") and stderr.count("\n") == 1, stderr
  assert stderr.startswith("xtr-tool: ") and named in stderr, stderr
  assert "Traceback" not in stderr and MISSING not in stderr


def test_gin_statements_that_gin_cannot_carry_out_are_refused_naming_the_file_or_binding(tmp_path):
  """Before: a traceback (ModuleNotFoundError, NameError, AttributeError), exit status 1."""
  (tmp_path / "unimported.gin").write_text("from __gin__ import dynamic_registration\n"
                                           "include 'gin/runs/smoke.gin'\n"
                                           "trainer.train.num_steps = 2\n")
  cases = [
      (["--gin_bindings=import nonexistent_module_xyz"],
       "xtr-tool: gin cannot carry out --gin_bindings='import nonexistent_module_xyz': No module "
       "named 'nonexistent_module_xyz'; is the module's name right, and is it installed?\n"),
      ([f"--gin_file={tmp_path / 'unimported.gin'}"],
       f"xtr-tool: gin cannot carry out {tmp_path / 'unimported.gin'}:3 (trainer.train.num_steps "
       "= 2): 'trainer' was not provided by an import statement; import the name's module first "
       "(e.g. `from xtr.training import trainer`).\n"),
      ([
          "--gin_bindings=from __gin__ import dynamic_registration",
          "--gin_bindings=from xtr.training import trainer", "--gin_bindings=trainer.tran.x = 1"
      ], "xtr-tool: gin cannot carry out --gin_bindings='trainer.tran.x = 1': Couldn't resolve "
       "selector trainer.tran; "),
  ]
  results = _probe("xtr.cli.train", [args for args, _ in cases])
  for (args, expected), (status, stderr) in zip(cases, results):
    assert status == cli.REFUSED and stderr.count("\n") == 1, (args, stderr)
    assert stderr.startswith(expected), (args, stderr)


def test_a_refusal_shows_its_traceback_only_with_the_switch():
  plain = run_tool("xtr.search_main", *_SEARCH, stdin="q\n")
  assert plain.returncode == 2
  assert plain.stderr == f"xtr-tool: no token index at {MISSING}/index: not a directory\n"
  traced = run_tool("xtr.search_main", *_SEARCH, "--traceback", stdin="q\n")
  assert traced.returncode == 2
  assert traced.stderr.startswith("Traceback (most recent call last):\n")
  assert traced.stderr.endswith(plain.stderr)


def test_help_states_the_exit_status():
  process = run_tool("xtr.search_main", "--help")
  assert process.returncode == 0 and process.stderr == ""
  assert "Exit status: 0 done; 2 refused" in process.stdout
  assert "--[no]traceback: Print the Python traceback of a refusal" in process.stdout


def _search_lines(stderr: str) -> list[str]:
  """stderr's lines (tqdm's redraws apart) that are not the search progress bar."""
  segments = stderr.replace("\r", "\n").split("\n")
  return [line for line in segments if line and not line.startswith("search:")]


def test_search_writes_through_pipes_caps_top_k_and_keeps_stderr_clean(exported, tmp_path):
  """A named pipe and /dev/stdout as --out are written, not replaced; --top_k and --k_prime
  above the index return what the index holds (the ranking of top_k = its documents,
  k' = its tokens); a leading BOM is not query text; stderr holds the progress bar only."""
  queries = tmp_path / "queries.txt"
  queries.write_bytes("\ufeffvitamin c\nscurvy\n".encode())
  manifest = json.loads((exported[1] / "manifest.json").read_text())
  assert manifest["num_docs"] == SLICE_DOCS
  with _pipe(tmp_path) as (pipe, read):
    capped = run_tool("xtr.search_main", f"--index={exported[1]}", f"--checkpoint={exported[0]}",
                      f"--queries={queries}", f"--out={pipe}", "--top_k=1000000000",
                      "--k_prime=1000000000")
    assert capped.returncode == 0, capped.stderr[-2000:]
    received = read()
  assert _search_lines(capped.stderr) == []
  exact = run_tool("xtr.search_main", f"--index={exported[1]}", f"--checkpoint={exported[0]}",
                   f"--queries={queries}", "--out=/dev/stdout", f"--top_k={SLICE_DOCS}",
                   f"--k_prime={manifest['num_indexed_tokens']}")
  assert exact.returncode == 0, exact.stderr[-2000:]
  assert received == exact.stdout
  rankings = [json.loads(line) for line in exact.stdout.splitlines()]
  assert [r["query"] for r in rankings] == ["vitamin c", "scurvy"]
  assert [len(r["results"]) for r in rankings] == [SLICE_DOCS] * 2
  trec = run_tool("xtr.search_main", f"--index={exported[1]}", f"--checkpoint={exported[0]}",
                  f"--queries={queries}", "--out=-", "--format=trec", "--top_k=5")
  assert trec.returncode == 0, trec.stderr[-2000:]  # A TREC run on stdout, the same rankings.
  assert [line.split()[:4] for line in trec.stdout.splitlines()
         ] == [[str(q), "Q0", r["doc_id"], str(rank)]
               for q, ranking in enumerate(rankings, 1)
               for rank, r in enumerate(ranking["results"][:5], 1)]


@pytest.mark.parametrize("module, flags, message", [
    ("xtr.search_main", ["--verbose", "--scoring=exhaustive"],
     "--verbose times each query alone; --scoring=exhaustive scores every query at once."),
    ("xtr.cli.eval_beir", ["--run_file={tmp}/r.json", "--out={tmp}/r.json"],
     "--run_file={tmp}/r.json names the file of --out: each output needs its own."),
    ("xtr.cli.eval_beir", ["--run_file={tmp}/link.json", "--out={tmp}/r.json"
                          ], "--run_file={tmp}/link.json names the file of --out"),
    ("xtr.cli.eval_beir", ["--run_file=-", "--out=-"], "--run_file=- names the file of --out"),
])
def test_outputs_and_switches_that_cannot_go_together_are_refused_first(
    tmp_path, module, flags, message):
  """Refused in one line, exit 2, before the (missing) index, model or data are read."""
  (tmp_path / "link.json").symlink_to(tmp_path / "r.json")
  flags = [flag.format(tmp=tmp_path) for flag in flags]
  process = run_tool(module, *(_SEARCH if module == "xtr.search_main" else _EVAL), *flags,
                     stdin="q\n")
  assert process.returncode == 2 and message.format(tmp=tmp_path) in process.stderr, process.stderr
  assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    "module, out, over",
    [
        ("xtr.cli.eval_beir", "index/manifest.json", "--index={tmp}/index"),
        ("xtr.cli.eval_beir", "data/qrels/test.tsv", "--data_dir={tmp}/data"),
        ("xtr.cli.adapt_alignment", "data/corpus.jsonl", "--data_dir={tmp}/data"),
        ("xtr.cli.adapt_alignment", "model/checkpoints/x.json", "--checkpoint={tmp}/model"),
        ("xtr.cli.eval_beir", "model/config.json", "--checkpoint={tmp}/model"),
        ("xtr.cli.analyze_tokens", "index/doc_ids.jsonl", "--index={tmp}/index"),
        ("xtr.search_main", "queries.tsv", "--queries={tmp}/queries.tsv"),
        ("xtr.cli.eval_beir", "model/scifact.json", None),  # Reports beside them are fine.
        ("xtr.cli.eval_beir", "data/test_results.json", None),
    ])
def test_an_output_is_never_written_over_an_input(tmp_path, module, out, over):
  """xtr-adapt-alignment --out=DATA/qrels/test.tsv replaced the qrels with its report, exit 0;
  --out=INDEX/manifest.json destroyed the index."""
  inputs = {
      "index/manifest.json": "{}",
      "index/doc_ids.jsonl": "",
      "data/qrels/test.tsv": "q",
      "data/corpus.jsonl": "",
      "model/checkpoints/x.json": "",
      "model/config.json": "{}",
      "queries.tsv": "1\tq\n"
  }
  for name, text in inputs.items():
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(text)
  given = {"index": "index", "checkpoint": "model", "data_dir": "data", "queries": "queries.tsv"}
  dropped = "data_dir" if module == "xtr.search_main" else "queries"  # A flag it lacks.
  flags = [f"--{flag}={tmp_path / name}" for flag, name in given.items() if flag != dropped]
  process = run_tool(module, *flags, f"--out={tmp_path / out}")
  assert process.returncode == 2, process.stderr  # The index here is no index.
  if over is None:
    assert "would write over" not in process.stderr, process.stderr
  else:
    assert (f"--out={tmp_path / out} would write over what {over.format(tmp=tmp_path)} holds: "
            "write it elsewhere.") in process.stderr, process.stderr
  assert {name: (tmp_path / name).read_text() for name in inputs} == inputs


def test_search_flags_that_the_scoring_does_not_read_are_warned_of():
  process = run_tool("xtr.search_main", *_SEARCH, "--scoring=exhaustive", "--k_prime=5",
                     "--impute=zero", "--top_k=3", stdin="q\n")
  warnings = [line for line in process.stderr.splitlines() if line.startswith("Warning")]
  assert warnings == [
      f"Warning: --{flag} has no effect with --scoring=exhaustive --searcher=scann."
      for flag in ("k_prime=5", "impute=zero")
  ]


def test_a_full_disk_is_refused_naming_the_output(exported):
  process = run_tool("xtr.search_main", f"--index={exported[1]}", f"--checkpoint={exported[0]}",
                     "--out=/dev/full", "--top_k=3", stdin="vitamin c\n")
  assert process.returncode == 2
  assert _search_lines(process.stderr) == [
      "xtr-tool: cannot write /dev/full: No space left on device; free space (or write "
      "elsewhere) and rerun"
  ]


def _with_nan(params):
  """`params` with a NaN in the projection's kernel."""
  kernel = np.array(params["projection"]["kernel"])
  kernel[0, 0] = np.nan
  return {**params, "projection": {**params["projection"], "kernel": kernel}}


def test_a_checkpoint_with_nan_is_refused_naming_it_and_the_parameter(tmp_path, t5_spm_path,
                                                                      scifact_slice):
  model = tmp_path / "nan_model"
  random_checkpoint(model, 0, t5_spm_path, edit=_with_nan)
  gin.clear_config()
  message = (f"The checkpoint {model} is damaged or diverged: its parameter "
             "['projection']['kernel'] holds NaN or infinite values.")
  with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
    encoding.load_params(str(model))
  process = run_tool("xtr.cli.export", "--gin_file=gin/models/t5_1_1_tiny.gin",
                     f"--gin_bindings=T5_SPM_PATH = '{t5_spm_path}'", f"--checkpoint={model}",
                     f"--corpus={scifact_slice / 'corpus.jsonl'}", f"--out={tmp_path / 'index'}")
  assert process.returncode == 2
  assert process.stderr.splitlines() == [
      f"xtr-tool: {message} Use another checkpoint (an "
      "earlier step of the run)."
  ]


def test_check_finite_names_the_parameter():
  encoding.check_finite({"a": np.ones(3), "b": {"c": np.zeros((2, 2), np.int32)}}, "ckpt")
  with pytest.raises(ValueError, match=r"parameter \['b'\]\['c'\] holds NaN or infinite"):
    encoding.check_finite({"a": np.ones(3), "b": {"c": np.array([1.0, -np.inf])}}, "ckpt")


@contextlib.contextmanager
def _pipe(tmp_path):
  """(a named pipe, read()): its read end is open, so that a writer's open does not wait and
  what it writes (up to the pipe's 64 KiB) waits in the pipe; read() returns it all, and checks
  that the pipe is still one (not replaced by a file)."""
  pipe = tmp_path / "pipe"
  os.mkfifo(pipe)
  fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)

  def read() -> str:
    assert pipe.is_fifo()
    chunks = []
    while chunk := os.read(fd, 1 << 16):
      chunks.append(chunk)
    return b"".join(chunks).decode()

  try:
    yield pipe, read
  finally:
    os.close(fd)


def test_a_pipe_is_written_in_place_not_replaced(tmp_path):
  with _pipe(tmp_path) as (pipe, read):
    io.write_results(str(pipe), {"a": 1})
    assert read() == '{\n  "a": 1\n}\n'


def test_dev_stdout_open_to_a_regular_file_is_written_not_replaced(tmp_path):
  """/dev/stdout resolves to the regular file the shell opened: it is written through, and
  /dev/stdout stays the link it was (an atomic rename would replace it, as root)."""
  out = tmp_path / "out.json"
  link = os.readlink("/dev/stdout")
  with open(out, "w") as stdout:
    subprocess.run(
        [sys.executable, "-c", "from xtr import io; "
         "io.write_results('/dev/stdout', {'a': 1})"], stdout=stdout, check=True, cwd=REPO)
  assert json.loads(out.read_text()) == {"a": 1}
  assert os.readlink("/dev/stdout") == link


def test_a_symlink_planted_at_the_temporary_name_is_not_followed(tmp_path):
  out, victim = tmp_path / "results.json", tmp_path / "victim"
  out.write_text("old\n")
  victim.write_text("precious\n")
  planted = tmp_path / f"results.json.tmp-{os.getpid()}"
  planted.symlink_to(victim)
  with pytest.raises(FileExistsError, match=f"exists .*: nothing was written; remove it and "
                     f"rerun: '{planted}'"):
    io.write_results(str(out), {"a": 1})
  assert victim.read_text() == "precious\n" and out.read_text() == "old\n"
  assert planted.is_symlink()


def test_a_full_disk_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
  out = tmp_path / "results.json"
  out.write_text("old\n")

  def no_space(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  monkeypatch.setattr(os, "fsync", no_space)
  with pytest.raises(
      OSError, match=f"^cannot write {out}: No space left on device; free space "
      r"\(or write elsewhere\) and rerun$") as raised:
    beir_eval.write_trec_run({"q": {"d": 1.0}}, str(out), tag="t")
  assert raised.value.errno == errno.ENOSPC
  assert out.read_text() == "old\n" and os.listdir(tmp_path) == ["results.json"]
  assert cli.refusal_line(raised.value).endswith(f"cannot write {out}: No space left on device; "
                                                 "free space (or write elsewhere) and rerun")


def test_refusal_lines_are_one_line():
  error = ValueError("Checkpoint does not fit:\n  missing tensor a\n  missing tensor b\n")
  assert cli.refusal_line(error).split(
      ": ", 1)[1] == ("Checkpoint does not fit: missing tensor a missing tensor b")


def test_refusal_lines_drop_the_call_site_that_gin_appends(tmp_path):
  (tmp_path / "qrels").mkdir()
  (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "one"}\n')
  (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "first?"}\n')
  (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1_0\n")
  with pytest.raises(ValueError, match="In call to configurable 'load_beir'") as raised:
    beir_eval.load_beir(tmp_path, "test")
  assert cli.refusal_line(raised.value).split(": ", 1)[1] == (
      f"{tmp_path}/qrels/test.tsv:2: score '1_0' is not a base-10 integer within ±2,147,483,647")


@pytest.mark.parametrize("name, content, message", [
    ("q.txt", "fine\nbad\0query\n", r"q.txt:2: control character U\+0000 at character 4"),
    ("q.txt", "fine\n\x1b[31mred\n", r"q.txt:2: control character U\+001B at character 1"),
    ("q.tsv", "1\tfine\n2\tbad\x7f\n", r"q.tsv:2: control character U\+007F at character 4"),
    ("q.jsonl", '{"_id": "1", "text": "a\\u0000b"}\n',
     r"q.jsonl:1: field 'text' holds a NUL \(U\+0000\) at character 2"),
])
def test_control_characters_in_queries_are_refused_naming_file_and_line(
    tmp_path, name, content, message):
  (tmp_path / name).write_text(content)
  with pytest.raises(ValueError, match=message):
    beir_files.read_queries(str(tmp_path / name))


def test_eval_refuses_a_nul_in_a_query_before_the_index_opens(tmp_path):
  """Before: xtr-eval-beir searched the query up to its NUL, silently (exit 0), where xtr-search
  refused the same queries.jsonl. The index is missing: the refusal came first."""
  data = tmp_path / "data"
  (data / "qrels").mkdir(parents=True)
  (data / "corpus.jsonl").write_text('{"_id": "d1", "text": "scurvy"}\n')
  (data / "queries.jsonl").write_text('{"_id": "q1", "text": "scurvy"}\n'
                                      '{"_id": "q2", "text": "vitamin\\u0000 c"}\n')
  (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td1\t1\n")
  [(status, stderr)] = _probe("xtr.cli.eval_beir",
                              [[f"--data_dir={data}", *_SEARCH, f"--out={tmp_path}/out.json"]])
  assert (status, stderr) == (cli.REFUSED, f"xtr-tool: {data}/queries.jsonl:2: field 'text' holds "
                              "a NUL (U+0000) at character 8, where the tokenizer ends the text "
                              "(as TensorFlow's does); remove it\n")
  assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("name, content, message", [
    ("q.txt", 'vitamin c\n{"_id": "7", "text": "scurvy"}\n',
     r"q.txt:2: a BEIR query record \(\{\"_id\", \"text\"\}\) in a plain-text queries file, "
     r"whose lines are queries; to read it so, name the file .jsonl \(not q.txt\)$"),
    ("queries", '  {"text": "scurvy", "_id": "7", "title": ""}\n',
     r"queries:1: a BEIR query record .* name the file .jsonl \(not queries\)$"),
    ("q.txt", "vitamin c\nsugar tea\n7\tscurvy\n",
     r"q.txt:3: a tab in a plain-text query \(an `id<TAB>text` line\?\); to read it so, name "
     r"the file .tsv \(not q.txt\), or replace the tab by a space$"),
    ("q.txt.gz", "scurvy\t\n", r"q.txt.gz:1: a tab in a plain-text query"),
])
def test_a_plain_text_queries_file_of_records_or_tabs_is_refused_naming_file_and_line(
    tmp_path, name, content, message):
  """Before: each JSON line, or `id<TAB>text` line, was one query's text, its line number the
  id (a wrong run file, exit 0)."""
  data = gzip.compress(content.encode()) if name.endswith(".gz") else content.encode()
  (tmp_path / name).write_bytes(data)
  with pytest.raises(ValueError, match=re.escape(str(tmp_path)) + "/" + message):
    beir_files.read_queries(str(tmp_path / name))


def test_plain_text_queries_that_are_neither_records_nor_tab_separated_are_read(tmp_path):
  (tmp_path / "q.txt").write_text('{"text": "a json query"}\n{not json\n \t \nlast\n')
  assert beir_files.read_queries(str(tmp_path / "q.txt")) == {
      "1": '{"text": "a json query"}',
      "2": "{not json",
      "4": "last"
  }


def test_a_record_or_tab_on_stdin_is_refused(monkeypatch):
  for content, message in (('{"_id": "7", "text": "scurvy"}\n', "write the queries to a .jsonl "
                            "file"), ("7\tscurvy\n", "write the queries to a .tsv file")):
    monkeypatch.setattr(sys, "stdin",
                        types.SimpleNamespace(buffer=python_io.BytesIO(content.encode())))
    with pytest.raises(ValueError, match=f"^<stdin>:1: .*; to read it so, {message}"):
      beir_files.read_queries("-")


@pytest.mark.parametrize("name, content, expected", [
    ("q.txt", "\ufeffvitamin c\nsugar tea\n", {
        "1": "vitamin c",
        "2": "sugar tea"
    }),
    ("q.tsv", "\ufeffa\tvitamin c\n", {
        "a": "vitamin c"
    }),
    ("q.jsonl", '\ufeff{"_id": "a", "text": "vitamin c"}\n', {
        "a": "vitamin c"
    }),
])
def test_a_leading_byte_order_mark_is_not_query_text(tmp_path, name, content, expected):
  (tmp_path / name).write_text(content, encoding="utf-8")
  assert beir_files.read_queries(str(tmp_path / name)) == expected
  (tmp_path / f"{name}.gz").write_bytes(gzip.compress(content.encode()))  # The same, gzipped.
  assert beir_files.read_queries(str(tmp_path / f"{name}.gz")) == expected


@pytest.mark.parametrize("name, value", [("batch_size", 0), ("doc_max_length", -1),
                                         ("query_max_length", 1e9), ("length_bucket", 0)])
def test_encoder_lengths_and_batch_size_of_gin_are_refused_naming_the_binding(name, value):
  with pytest.raises(
      ValueError, match=rf"xtr.models.encoding.Encoder.{name} = {value!r}: expected a "
      "positive integer; check its gin binding."):
    encoding.Encoder(None, model=None, vocabulary=None, **{name: value})


def test_every_console_script_is_probed():
  """Every console script of setup.py is among the probed modules, so each is shown to refuse
  through `cli.run` (one line, exit status 2)."""
  scripts = re.findall(r'"xtr-[\w-]+=(xtr\.[\w.]+):console_entry_point"',
                       (REPO / "setup.py").read_text())
  assert len(scripts) == 12 and set(scripts) == set(_CASES)


def test_an_imputation_beyond_the_similarities_scale_is_refused():
  """Before, --impute=1e8 ranked by float32 cancellation (scores 0 where eq. 4 gives 0.85) and
  --impute=3e38 called the index damaged; beyond ranker.MAX_IMPUTE, a score's float32 spacing
  would swallow the similarities: refused, naming the flag, before the index is read."""
  for status, stderr in _probe("xtr.search_main",
                               [[*_SEARCH, "--impute=1e8"], [*_SEARCH, "--impute=-3e38"]]):
    assert status == 2 and stderr.strip().endswith(
        "give top_k_prime, zero, none or a number in [-10000, 10000]."), stderr
    assert "--impute=" in stderr and len(stderr.strip().splitlines()) == 1, stderr
