"""Multi-host training on this machine: `xtr-train --multihost` in 2 processes of 4 CPU devices
each (jax.distributed on 127.0.0.1, gloo collectives) against one process of 8 devices.

Two meshes: (8, 1), where each process feeds its own half of every batch, read from its own
file of the triples (split in two), and (4, 2) with the model axis split across the processes,
where both processes hold every row and feed the same rows. After 3 steps, the losses and the
parameters equal the single-process run's. Shuffling is off, so that every run's global batches
hold the same rows (for (8, 1), host 0's file first, where one process reads the two files in
turn): the in-batch loss does not depend on the order of the queries.
"""
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
import tensorflow as tf

from xtr.index import reader
from xtr.models import encoding

REPO = pathlib.Path(__file__).resolve().parents[1]
STEPS = 3
BINDINGS = (f"trainer.train.num_steps = {STEPS}", "trainer.train.log_every_steps = 1",
            f"checkpoints.Checkpointer.save_every_steps = {STEPS}",
            "xtr.data.pipeline.get_dataset.shuffle = False")
TIMEOUT_S = 300


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def triples(tmp_path_factory, msmarco_triples_path) -> str:
  """The 100 triples in two files of 50: the glob pattern of the files."""
  directory = tmp_path_factory.mktemp("triples")
  lines = msmarco_triples_path.read_text(encoding="utf-8").splitlines(keepends=True)
  for i in range(2):
    (directory / f"triples-{i}.tsv").write_text("".join(lines[50 * i:50 * (i + 1)]))
  return str(directory / "triples-*.tsv")


def _train(model_dir, triples: str, num_processes: int, *bindings: str) -> list[str]:
  """Runs `xtr-train` on gin/runs/smoke_msmarco.gin in `num_processes` processes sharing 8 CPU
  devices; returns each process's output. Stops every process on failure or timeout."""
  devices = 8 // num_processes
  command = [
      sys.executable, "-m", "xtr.cli.train", "--gin_file=gin/runs/smoke_msmarco.gin",
      f"--gin_bindings=MODEL_DIR = '{model_dir}'", f"--gin_bindings=TRIPLES_PATH = '{triples}'",
      *[f"--gin_bindings={b}" for b in (*BINDINGS, *bindings)]
  ]
  if num_processes > 1:
    command += [
        "--multihost", f"--coordinator_address=127.0.0.1:{_free_port()}",
        f"--num_processes={num_processes}"
    ]
  return _run_all([
      command + ([f"--process_id={i}"] if num_processes > 1 else []) for i in range(num_processes)
  ], devices)


def _run_all(commands: list[list[str]], devices: int) -> list[str]:
  """Runs the commands at once, each with `devices` CPU devices; returns their outputs once all
  have exited 0. Stops every process on failure or timeout."""
  env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
  processes = [
      subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True) for command in commands
  ]
  try:
    outputs = [p.communicate(timeout=TIMEOUT_S)[0] for p in processes]
  finally:
    for p in processes:
      p.kill()
      p.wait()
  for p, output in zip(processes, outputs):
    assert p.returncode == 0, "\n-----\n".join(o[-3000:] for o in outputs)
  return outputs


def _losses(model_dir) -> dict[int, float]:
  """The loss of every step, from the TensorBoard events that process 0 writes."""
  losses = {}
  for path in tf.io.gfile.glob(str(model_dir / "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag == "loss":
          losses[event.step] = float(tf.make_ndarray(value.tensor))
  return losses


def _evaluated(data_dir) -> tuple[str, ...]:
  """Bindings of a dev evaluation at the last step (`dev_eval.DevEvaluator`) on `data_dir`."""
  return ("from xtr.evaluation import dev_eval",
          "trainer.train.evaluator = @dev_eval.DevEvaluator()",
          f"dev_eval.DevEvaluator.data_dir = '{data_dir}'", "dev_eval.DevEvaluator.split = 'test'",
          f"dev_eval.DevEvaluator.every_steps = {STEPS}", "dev_eval.DevEvaluator.sampled_docs = 5",
          "dev_eval.DevEvaluator.doc_max_length = 32", "dev_eval.DevEvaluator.batch_size = 8")


def _dev_ndcg(output: str) -> str:
  return re.search(r"dev_ndcg@10 [0-9.]+", output).group(0)


@pytest.fixture(scope="module")
def single_process(tmp_path_factory, triples, scifact_slice):
  model_dir = tmp_path_factory.mktemp("single")
  output, = _train(model_dir, triples, 1, *_evaluated(scifact_slice))
  assert "Mesh {'data': 8, 'model': 1}" in output
  return _losses(model_dir), encoding.load_params(str(model_dir)), _dev_ndcg(output)


@pytest.mark.parametrize("mesh,bindings,feeds", [
    ("(8, 1)", (), ["block 0 of 2", "block 1 of 2"]),
    ("(4, 2), model across processes",
     ("partitioning.make_mesh.num_partitions = 2",
      "partitioning.make_mesh.dcn_mesh_shape = (1, 2)"), ["block 0 of 1", "block 0 of 1"]),
])
def test_two_processes_train_like_one(tmp_path, triples, single_process, scifact_slice, mesh,
                                      bindings, feeds):
  """...and evaluate like one: the dev evaluation's outputs are sharded over hosts (before, every
  process failed fetching them)."""
  del mesh
  outputs = _train(tmp_path, triples, 2, *bindings, *_evaluated(scifact_slice))
  for process, (output, block) in enumerate(zip(outputs, feeds)):
    assert re.search(f"process {process} of 2 feeds {block}", output), output[-3000:]
  reference_losses, reference_params, reference_ndcg = single_process
  assert _dev_ndcg(outputs[0]) == reference_ndcg
  losses = _losses(tmp_path)
  assert sorted(losses) == list(range(1, STEPS + 1))
  np.testing.assert_allclose([losses[s] for s in sorted(losses)],
                             [reference_losses[s] for s in sorted(losses)], atol=1e-5, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5),
               encoding.load_params(str(tmp_path)), reference_params)


_INTERLEAVED = """
import sys
import jax
import numpy as np
from jax.experimental import multihost_utils
from xtr.training import partitioning
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))
by_process = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
order = [by_process[i] for i in (0, 4, 1, 5, 2, 6, 3, 7)]  # data shards 0, 2, 4, 6 on process 0
mesh = jax.sharding.Mesh(np.array(order).reshape(8, 1), ("data", "model"))
layout = partitioning.data_layout(mesh)
# Each host feeds 2 rows per data shard it holds: its input shard's rows 0..7.
local = {"x": np.arange(8, dtype=np.int32) + 100 * layout.shard_id}
batch = partitioning.global_batch(local, mesh, layout)
print("layout", layout.shard_id, layout.num_shards)
print("global", multihost_utils.process_allgather(batch["x"], tiled=True).tolist())
"""


def test_non_consecutive_rows_feed_their_devices():
  """Two processes on a mesh whose data axis alternates between them: each feeds its own
  (non-consecutive) data shards, and each row of the global batch lands on the device that
  holds it: host h's local row 2k + j is row j of data shard (its k-th shard)."""
  address = f"127.0.0.1:{_free_port()}"
  outputs = _run_all([[sys.executable, "-c", _INTERLEAVED, address, str(i)] for i in range(2)], 4)
  assert "layout 0 2" in outputs[0] and "layout 1 2" in outputs[1]
  # Data shard s (rows 2s, 2s + 1) is held by process s % 2, as its (s // 2)-th shard.
  expected = [100 * (s % 2) + 2 * (s // 2) + j for s in range(8) for j in range(2)]
  for output in outputs:
    assert f"global {expected}" in output, output[-3000:]


def test_each_process_exports_its_shard(exported, scifact_slice, t5_spm_path, tmp_path):
  """`xtr-export --multihost` in 2 processes: process i writes shard i of 2, and the shards,
  searched as one index, hold the single-process export's documents and tokens."""
  model_dir, single_dir = exported
  command = [
      sys.executable, "-m", "xtr.cli.export", f"--gin_file={REPO}/gin/models/t5_1_1_tiny.gin",
      f"--gin_bindings=T5_SPM_PATH = '{t5_spm_path}'",
      "--gin_bindings=xtr.models.encoding.Encoder.doc_max_length = 64", f"--checkpoint={model_dir}",
      f"--corpus={scifact_slice / 'corpus.jsonl'}", f"--out={tmp_path / 'index'}",
      "--docs_per_chunk=40", "--multihost", f"--coordinator_address=127.0.0.1:{_free_port()}",
      "--num_processes=2"
  ]
  _run_all([command + [f"--process_id={i}"] for i in range(2)], 4)
  assert sorted(os.listdir(tmp_path / "index")) == ["shard-00000-of-00002", "shard-00001-of-00002"]
  single = reader.open_index(str(single_dir))
  queries = np.random.default_rng(0).normal(size=(6, single.dim)).astype(np.float32)
  want = single.search_tokens(queries, 50, "bruteforce")

  def check_shards():
    sharded = reader.open_index(str(tmp_path / "index"))
    assert sharded.doc_ids == single.doc_ids and sharded.num_tokens == single.num_tokens
    got = sharded.search_tokens(queries, 50, "bruteforce")
    np.testing.assert_allclose(got[0], want[0], atol=1e-5)
    for a, b in zip(got[1:], want[1:]):
      np.testing.assert_array_equal(a, b)

  check_shards()
  # A resume after host 1 lost its shard: host 0 finds its shard complete and exits while host 1
  # exports. JAX waited 300 s at host 0's exit for host 1, then aborted both (exit 134, host 1's
  # shard unfinished): on a real corpus, every resume. Here JAX's exit wait runs at 1/300 (300 s
  # would be 1 s; the export's week, 2,016 s).
  shutil.rmtree(tmp_path / "index" / "shard-00001-of-00002")
  scaled = ("import jax, runpy, sys; initialize = jax.distributed.initialize; "
            "jax.distributed.initialize = lambda shutdown_timeout_seconds=300, **cluster: "
            "initialize(shutdown_timeout_seconds=max(1, shutdown_timeout_seconds // 300), "
            "**cluster); runpy.run_module('xtr.cli.export', run_name='__main__')")
  command[1:3] = ["-c", scaled]
  command[-2] = f"--coordinator_address=127.0.0.1:{_free_port()}"
  outputs = _run_all([command + [f"--process_id={i}"] for i in range(2)], 4)
  assert "shard-00000-of-00002 is already a complete index" in outputs[0]
  check_shards()
  # --from_index with --multihost: process i rebuilds shard i of the sharded source (it looked
  # for the source's own manifest, and every process refused).
  _run_all([[
      sys.executable, "-m", "xtr.cli.export", f"--from_index={tmp_path / 'index'}",
      f"--out={tmp_path / 'again'}", "--multihost", f"--coordinator_address=127.0.0.1:{port}",
      "--num_processes=2", f"--process_id={i}"
  ] for port in [_free_port()] for i in range(2)], 4)
  again = reader.open_index(str(tmp_path / "again"))
  assert again.doc_ids == single.doc_ids and again.num_tokens == single.num_tokens


def test_multihost_export_refuses_an_explicit_shard(exported, tmp_path):
  process = subprocess.run([
      sys.executable, "-m", "xtr.cli.export", f"--checkpoint={exported[0]}", "--corpus=c.jsonl",
      f"--out={tmp_path}", "--multihost", "--num_shards=4"
  ], capture_output=True, text=True, cwd=REPO, check=False)
  assert process.returncode == 2
  assert "--num_shards=4 with --multihost" in process.stderr
