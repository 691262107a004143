"""Trainer: sharded steps equal single-device steps, exact resume after a kill, smoke run learns."""
import dataclasses
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import flax.linen as nn
import gin
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
import tensorflow as tf

from xtr import io
from xtr.data import pipeline
from xtr.evaluation import dev_eval  # noqa: F401 (gin: trainer.train.evaluator)
from xtr.models import hf_weights
from xtr.models import layer_stack
from xtr.models import salience
from xtr.models import t5
from xtr.models import xtr_encoder
from xtr.text import vocabularies
from xtr.training import checkpoints
from xtr.training import initialization
from xtr.training import objective
from xtr.training import optimizers
from xtr.training import partitioning
from xtr.training import step as step_lib
from xtr.training import trainer

REPO = pathlib.Path(__file__).resolve().parents[1]
TINY = t5.T5Config(vocab_size=512, emb_dim=32, num_heads=4, num_layers=2, head_dim=8, mlp_dim=64)


def _batch(rng: np.random.Generator, num_queries=8, docs_per_query=2, lq=12, ld=20):
  """Random token ids with random padding (id 0) at the end of each sequence."""

  def ids(*shape):
    tokens = rng.integers(1, TINY.vocab_size, size=shape)
    lengths = rng.integers(2, shape[-1] + 1, size=shape[:-1])
    return np.where(np.arange(shape[-1]) < lengths[..., None], tokens, 0).astype(np.int32)

  return {"query_tokens": ids(num_queries, lq), "doc_tokens": ids(num_queries, docs_per_query, ld)}


def _one_step(mesh, scoring, batch, micro_batch_size=None, config=TINY, pretrained=None,
              optimizer="adafactor", fsdp=False):
  """One train step (from the `pretrained` params, if given; FSDP rules with `fsdp`); "aligner"
  is ALIGNER's recipe (top-1, entropy-regularized salience, with a larger ε so that float32
  reductions in another order stay within the tolerance)."""
  gate = salience.Salience(epsilon=0.05) if scoring == "aligner" else None
  model = xtr_encoder.XTREncoder(backbone=t5.T5Encoder(config), embed_dim=16, salience=gate)
  optimizer = optimizers.make_optimizer(
      optimizer, optimizers.warmup_constant(learning_rate=1e-2, warmup_steps=0))
  with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.axis_rules(fsdp)):
    state, shardings = step_lib.init_state(model, optimizer, mesh, jax.random.key(0), pretrained)
    train_step = step_lib.make_train_step(model, optimizer, mesh, shardings,
                                          objective.Objective(scoring, k_train=16),
                                          micro_batch_size)
    initial = jax.device_get(state.params)
    state, metrics = train_step(
        state, partitioning.global_batch(batch, mesh, partitioning.data_layout(mesh)), None)
  return initial, jax.device_get(state.params), jax.device_get(metrics), state


def _assert_same_step(step, reference, params_atol=1e-5):
  """Equal loss and metrics (1e-5), and equal parameters before and after the step
  (`params_atol`)."""
  assert step[2].keys() == reference[2].keys()
  for key in step[2]:
    np.testing.assert_allclose(step[2][key], reference[2][key], atol=1e-5, rtol=1e-5, err_msg=key)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=params_atol, rtol=1e-5), step[1],
               reference[1])
  jax.tree.map(np.testing.assert_array_equal, step[0], reference[0])
  changed = jax.tree.leaves(jax.tree.map(lambda a, b: not np.allclose(a, b), step[1], step[0]))
  assert sum(changed) > len(changed) // 2  # The step really updated the parameters.


@pytest.mark.parametrize("scoring", ["xtr", "colbert", "aligner"])
def test_sharded_step_equals_single_device(scoring):
  assert jax.device_count() == 8
  batch = _batch(np.random.default_rng(0))
  single = _one_step(partitioning.make_mesh(devices=jax.devices()[:1]), scoring, batch)
  sharded = _one_step(partitioning.make_mesh(num_partitions=2), scoring, batch)
  # The (4, 2) mesh really splits parameters along `model` and the batch along `data`.
  mlp_sharding = sharded[3].params["backbone"]["layers_0"]["mlp"]["wi_0"]["kernel"].sharding
  assert mlp_sharding.mesh.shape == {"data": 4, "model": 2}
  assert mlp_sharding.spec == jax.sharding.PartitionSpec(None, "model")
  assert ("positive_token_hit_rate" in single[2]) == (scoring == "xtr")
  _assert_same_step(sharded, single)


def test_fsdp_step_equals_single_device():
  """FSDP on (4, 2): parameters split over `data` on their embed axis too, the same step."""
  batch = _batch(np.random.default_rng(0))
  single = _one_step(partitioning.make_mesh(devices=jax.devices()[:1]), "xtr", batch)
  sharded = _one_step(partitioning.make_mesh(num_partitions=2), "xtr", batch, fsdp=True)
  mlp_sharding = sharded[3].params["backbone"]["layers_0"]["mlp"]["wi_0"]["kernel"].sharding
  assert mlp_sharding.spec == jax.sharding.PartitionSpec("data", "model")
  _assert_same_step(sharded, single)


@pytest.mark.parametrize("scoring", ["xtr", "colbert", "aligner"])
@pytest.mark.parametrize("mesh", ["one device", "(4, 2)"])
def test_micro_batched_step_equals_whole_batch_step(scoring, mesh):
  """Gradient caching: 16 queries in micro-batches of 8 (2 per data shard on (4, 2)) give the
  step of the whole batch."""
  batch = _batch(np.random.default_rng(1), num_queries=16)
  mesh = (partitioning.make_mesh(devices=jax.devices()[:1])
          if mesh == "one device" else partitioning.make_mesh(num_partitions=2))
  _assert_same_step(_one_step(mesh, scoring, batch, micro_batch_size=8),
                    _one_step(mesh, scoring, batch))


def test_a_scanned_rematerialized_step_equals_the_loop_step():
  """On the (4, 2) mesh, from the same weights (stacked): T5 layers under `nn.scan`, "full"
  remat, their stacked parameters split along `model` like the loop's. AdamW, whose update is
  elementwise: Adafactor's parameter-scale and clipping RMS span a whole stacked kernel
  (docs/training.md)."""
  batch = _batch(np.random.default_rng(2))
  mesh = partitioning.make_mesh(num_partitions=2)
  loop = _one_step(mesh, "xtr", batch, optimizer="adamw")
  scanned = _one_step(mesh, "xtr", batch, config=dataclasses.replace(TINY, scan_layers=True,
                                                                     remat_policy="full"),
                      pretrained={
                          **loop[0], "backbone": layer_stack.stack(loop[0]["backbone"])
                      }, optimizer="adamw")
  sharding = scanned[3].params["backbone"]["layers"]["mlp"]["wi_0"]["kernel"].sharding
  assert sharding.spec == jax.sharding.PartitionSpec(None, None, "model")
  unstacked = lambda params: {**params, "backbone": layer_stack.unstack(params["backbone"])}
  # AdamW's first step moves a parameter by lr·g/(|g| + ε) (lr 1e-2, ε 1e-8): where a gradient is
  # a few ε, the float32 rounding of sums taken in another order (scan against loop) moves the
  # update by more than 1e-5 (seen on one CPU: 1.3e-5, a gradient of ~5e-8). 1e-4 is 1 % of lr; a
  # wrong gradient's sign moves an update by 2e-2, and the loss and grad_norm stay within 1e-5.
  _assert_same_step((unstacked(scanned[0]), unstacked(scanned[1]), scanned[2]), loop,
                    params_atol=1e-4)


def _step_memory(data: int, fsdp: bool):
  """XLA's memory analysis, per device, of the train step of a T5 encoder (AdamW: two moments
  per parameter) compiled for a (data, 1) mesh, with or without FSDP rules."""
  config = dataclasses.replace(TINY, emb_dim=128, mlp_dim=512, num_heads=8, head_dim=16)
  model = xtr_encoder.XTREncoder(backbone=t5.T5Encoder(config), embed_dim=16)
  optimizer = optimizers.make_optimizer("adamw")
  mesh = partitioning.make_mesh(devices=jax.devices()[:data])
  batch = {
      name: jax.ShapeDtypeStruct(shape, np.int32, sharding=partitioning.batch_sharding(mesh))
      for name, shape in (("query_tokens", (8, 12)), ("doc_tokens", (8, 2, 20)))
  }
  with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.axis_rules(fsdp)):
    state = step_lib.abstract_state(model, optimizer, mesh)
    step = step_lib.make_train_step(model, optimizer, mesh,
                                    jax.tree.map(lambda x: x.sharding, state),
                                    objective.Objective("xtr", k_train=16))
    return step.lower(state, batch, None).compile().memory_analysis()


def test_fsdp_shards_parameters_and_optimizer_state_over_data():
  """Argument bytes per device (parameters, AdamW moments, batch) fall ≥ 3.5× from 1 to 4 data
  shards with FSDP; without it, the replicated parameters and moments keep them above half.
  Activations stay split by batch (were they split by embed, as the weights, the temporaries
  would grow past the replicated layout's: 11.1 against 9.5 MB here)."""
  one = _step_memory(1, fsdp=True).argument_size_in_bytes
  fsdp, replicated = _step_memory(4, fsdp=True), _step_memory(4, fsdp=False)
  assert one / fsdp.argument_size_in_bytes >= 3.5
  assert one / replicated.argument_size_in_bytes < 2
  assert fsdp.temp_size_in_bytes <= replicated.temp_size_in_bytes


def _xtr_train(model_dir, *bindings, wait=True, output=subprocess.DEVNULL):
  """Runs xtr-train on gin/runs/smoke_msmarco.gin; without `wait`, the process (its stdout:
  `output`)."""
  command = [
      sys.executable, "-m", "xtr.cli.train", "--gin_file=gin/runs/smoke_msmarco.gin",
      f"--gin_bindings=MODEL_DIR='{model_dir}'", *[f"--gin_bindings={b}" for b in bindings]
  ]
  env = {**os.environ, "XLA_FLAGS": ""}
  if wait:
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=True)
  return subprocess.Popen(command, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT,
                          text=True)


def _train_smoke_in_process(*bindings: str) -> step_lib.TrainState:
  """`trainer.train()` under gin/runs/smoke_msmarco.gin and `bindings`, in this process."""
  gin.clear_config()
  gin.parse_config_files_and_bindings([str(REPO / "gin/runs/smoke_msmarco.gin")], list(bindings))
  try:
    return trainer.train()
  finally:
    gin.clear_config()


def _steps(model_dir: pathlib.Path) -> list[int]:
  """Finalized checkpoint steps (orbax renames a step directory to its number when complete)."""
  directory = model_dir / "checkpoints"
  if not directory.exists():
    return []
  return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def _final_params(model_dir: pathlib.Path, step: int):
  restored = ocp.StandardCheckpointer().restore(model_dir / "checkpoints" / str(step) / "state")
  return restored["params"]


def test_resume_after_kill_equals_uninterrupted(tmp_path):
  every = "checkpoints.Checkpointer.save_every_steps = 3"
  keep = "checkpoints.Checkpointer.keep = 100"
  killed = tmp_path / "killed"
  process = _xtr_train(killed, every, keep, "trainer.train.num_steps = 100000", wait=False)
  try:
    while not _steps(killed):
      assert process.poll() is None, "xtr-train died before its first checkpoint"
      time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
  finally:
    process.kill()
    process.wait()
  assert process.returncode == -signal.SIGKILL
  last = _steps(killed)[-1]
  target = last + 3
  resumed = _xtr_train(killed, every, keep, f"trainer.train.num_steps = {target}")
  assert f"Resumed from {killed} at step {last}." in resumed.stdout
  reference = tmp_path / "reference"
  _xtr_train(reference, every, keep, f"trainer.train.num_steps = {target}")
  jax.tree.map(np.testing.assert_array_equal, _final_params(killed, target),
               _final_params(reference, target))


def test_a_checkpoint_on_a_full_disk_is_refused_naming_its_directory(tmp_path, monkeypatch):
  """The dataset iterator's save fails as TensorFlow's ResourceExhaustedError on a full disk
  (measured on a small tmpfs); an asynchronous save's error surfaces when the trainer waits."""
  checkpointer = checkpoints.Checkpointer(str(tmp_path / "model"))
  full = tf.errors.ResourceExhaustedError(
      None, None, f"{tmp_path}/model/checkpoints/2.orbax-checkpoint-tmp/dataset/part-0; No space "
      "left on device [Op:SaveV2]")

  def failing(*_, **__):
    raise full

  for method in ("save", "wait_until_finished"):
    monkeypatch.setattr(checkpointer.manager, method, failing)
  message = (rf"^cannot write {tmp_path}/model/checkpoints: .*No space left on device \[Op:SaveV2\]"
             r"; free space \(or write elsewhere\) and rerun$")
  with pytest.raises(OSError, match=message):
    checkpointer.maybe_save(2, {}, None, force=True)
  with pytest.raises(OSError, match=message):
    checkpointer.close()


def test_a_run_resumed_on_another_data_layout_restores_the_state_and_starts_its_data_afresh(
    tmp_path, monkeypatch, capfd):
  """A resized pod: the iterator of a checkpoint is restored where the data layout and process
  match, and otherwise left at its start with a warning (before: TensorFlow's NotFoundError)."""
  layout = {"processes": 1, "shard_id": 0, "num_shards": 1, "batch_size": 8}
  state = {"w": jax.numpy.arange(4.0)}
  abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)

  def save(step, directory, **resized):
    checkpointer = checkpoints.Checkpointer(str(directory), async_save=False, data_layout={
        **layout,
        **resized
    })
    iterator = iter(tf.data.Dataset.range(100))
    for _ in range(3):
      next(iterator)
    checkpointer.maybe_save(step, state, iterator, force=True)
    checkpointer.close()

  def resume(directory, **resized):
    """The restored state and the resumed iterator's next element."""
    iterator = iter(tf.data.Dataset.range(100))
    restored = checkpoints.Checkpointer(str(directory), data_layout={
        **layout,
        **resized
    }).restore_latest(abstract, iterator)
    return restored, int(next(iterator))

  save(1, tmp_path / "run")
  restored, first = resume(tmp_path / "run")
  assert first == 3 and "Warning" not in capfd.readouterr().err
  np.testing.assert_array_equal(restored["w"], state["w"])
  restored, first = resume(tmp_path / "run", num_shards=2, batch_size=4)
  np.testing.assert_array_equal(restored["w"], state["w"])
  assert first == 0 and re.search(
      r"Warning: the input pipeline of .*/run/checkpoints/1 is not restored: it fed the data "
      r"layout .*'num_shards': 1.*this run feeds .*'num_shards': 2",
      capfd.readouterr().err)
  with monkeypatch.context() as patched:  # Saved by process 1 of 2.
    patched.setattr(checkpoints, "_process_path", lambda directory: directory / "process_1-of-2")
    save(1, tmp_path / "two")
  restored, first = resume(tmp_path / "two")
  assert first == 0 and "saved by other processes (process_1-of-2)" in capfd.readouterr().err


def test_sigterm_saves_the_step_reached_and_resumes_exactly(tmp_path):
  """A preemption notice (SIGTERM) mid-run: the trainer saves the step it reached, exits 0, and
  the resumed run ends with the parameters of an uninterrupted one."""
  bindings = ("checkpoints.Checkpointer.save_every_steps = 1000",
              "trainer.train.log_every_steps = 1")
  stopped = tmp_path / "stopped"
  process = _xtr_train(stopped, *bindings, "trainer.train.num_steps = 100000", wait=False,
                       output=subprocess.PIPE)
  try:
    lines = []
    for line in process.stdout:  # SIGTERM once training is under way.
      lines.append(line)
      if line.startswith("step 3/"):
        process.send_signal(signal.SIGTERM)
        break
    output = "".join(lines) + process.communicate(timeout=300)[0]
  finally:
    process.kill()
    process.wait()
  assert process.returncode == 0, output[-3000:]
  stopped_at = int(re.search(r"Preempted \(SIGTERM\) after step (\d+): saved it", output)[1])
  assert _steps(stopped) == [stopped_at] and stopped_at >= 3
  target = stopped_at + 2
  resumed = _xtr_train(stopped, *bindings, f"trainer.train.num_steps = {target}")
  assert f"Resumed from {stopped} at step {stopped_at}." in resumed.stdout
  reference = tmp_path / "reference"
  _xtr_train(reference, *bindings, f"trainer.train.num_steps = {target}")
  jax.tree.map(np.testing.assert_array_equal, _final_params(stopped, target),
               _final_params(reference, target))


def test_a_short_run_saves_by_time_logs_throughput_evaluates_and_traces(
    tmp_path, capsys, scifact_slice):
  """save_every_minutes: a save at each logging step past the interval, not only every
  save_every_steps steps; the log has tokens/s (no MFU on CPU) and the dev evaluator's nDCG@10
  every 3 steps; profile_steps writes a trace."""
  _train_smoke_in_process(
      f"MODEL_DIR = '{tmp_path}'", "trainer.train.num_steps = 6",
      "trainer.train.log_every_steps = 2", "trainer.train.profile_steps = (2, 3)",
      "trainer.train.evaluator = @xtr.evaluation.dev_eval.DevEvaluator()",
      f"xtr.evaluation.dev_eval.DevEvaluator.data_dir = '{scifact_slice}'",
      "xtr.evaluation.dev_eval.DevEvaluator.split = 'test'",
      "xtr.evaluation.dev_eval.DevEvaluator.every_steps = 3",
      "xtr.evaluation.dev_eval.DevEvaluator.sampled_docs = 10",
      "checkpoints.Checkpointer.save_every_steps = 1000",
      "checkpoints.Checkpointer.save_every_minutes = 1e-9", "checkpoints.Checkpointer.keep = 100")
  assert _steps(tmp_path) == [1, 2, 4, 6]
  log = capsys.readouterr().out
  assert len(re.findall(r"steps/s \| \d+ tokens/s \| eta", log)) == 4 and "MFU" not in log
  assert [int(step) for step in re.findall(r"step (\d) \| dev_ndcg@10 0\.\d{4}\n", log)] == [3, 6]
  assert list((tmp_path / "profile").rglob("*.xplane.pb"))


def test_smoke_run_lowers_the_loss(tmp_path):
  run = _xtr_train(tmp_path, "trainer.train.num_steps = 60")
  losses = [float(x) for x in re.findall(r"\| loss ([0-9.]+) \|", run.stdout)]
  assert len(losses) == 7  # Steps 1, 10, 20, ..., 60.
  assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.1, losses
  assert list((tmp_path).glob("events.out.tfevents.*")), "no TensorBoard event file"
  assert _steps(tmp_path) == [50, 60]


def _train_from_tiny_hf_t5(tmp_path, msmarco_triples_path, t5_spm_path, num_steps: int,
                           bindings: str):
  """Saves a random 2-layer transformers T5 (d_model 64) as the pretrained backbone and trains
  the smoke run from it (`bindings`: gin lines importing tasks.beir, xtr.models.xtr_encoder and
  xtr.training.trainer); returns its transformers config."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.manual_seed(0)
  hf_config = transformers.T5Config(vocab_size=32128, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                    num_heads=4, feed_forward_proj="gated-gelu")
  transformers.T5EncoderModel(hf_config).save_pretrained(tmp_path / "hf")
  _train_smoke_in_process(
      f"MODEL_DIR = '{tmp_path / 'model'}'", f"TRIPLES_PATH = '{msmarco_triples_path}'",
      f"T5_SPM_PATH = '{t5_spm_path}'", f"trainer.train.num_steps = {num_steps}",
      f"""from __gin__ import dynamic_registration
      from xtr.data.tasks import beir
      from xtr.models import hf_weights
      from xtr.models import layer_stack
      from xtr.models import t5
      from xtr.models import xtr_encoder
      from xtr.training import initialization
      from xtr.training import objective
      initialization.Initialization.pretrained_backbone = @hf_weights.load_t5_backbone
      hf_weights.load_t5_backbone.path = '{tmp_path / 'hf'}'
      hf_weights.load_t5_backbone.config = @t5.T5Config()
      {bindings}""")
  return hf_config


@pytest.mark.parametrize("projection_init,sample_task", [("random", None), ("pca", None),
                                                         ("pca", "beir_pairs")])
def test_num_steps_zero_saves_the_pretrained_backbone(tmp_path, msmarco_triples_path, t5_spm_path,
                                                      scifact_dir, projection_init, sample_task):
  """`pretrained_backbone` loads HF weights into the model; num_steps = 0 saves them as is.

  With projection_init="pca", the saved projection is the PCA of the backbone's token vectors:
  orthonormal columns, unlike a random init; they span the PCA of the first batches of
  `projection_sample_task` (here SciFact pairs) where one is given, not of the training task's.
  """
  from xtr.models import encoding  # pylint: disable=g-import-not-at-top
  hf_config = _train_from_tiny_hf_t5(
      tmp_path, msmarco_triples_path, t5_spm_path, 0, f"""
      initialization.Initialization.projection_init = '{projection_init}'
      xtr_encoder.XTREncoder.embed_dim = 32
      initialization.Initialization.projection_sample_task = {sample_task!r}
      beir.load_pairs.data_dir = '{scifact_dir}'""")
  saved = encoding.load_params(str(tmp_path / "model"))
  expected = hf_weights.t5_params_from_hf(hf_weights.read_safetensors(tmp_path / "hf"),
                                          hf_weights.t5_config_from_hf(hf_config.to_dict()))
  jax.tree.map(np.testing.assert_array_equal, saved["backbone"], expected)
  kernel = saved["projection"]["kernel"]
  assert kernel.shape == (64, 32)
  orthonormal = np.allclose(kernel.T @ kernel, np.eye(32), atol=1e-4)
  assert orthonormal == (projection_init == "pca")
  if projection_init == "pca":
    vocab = vocabularies.t5_vocabulary(str(t5_spm_path))
    lengths = {"query": 32, "positive": 64, "negative": 64}  # smoke_msmarco.gin's, batches of 16

    def pca_of(task):
      gin.bind_parameter("tasks.msmarco.triples_files.path", str(msmarco_triples_path))
      gin.bind_parameter("tasks.beir.load_pairs.data_dir", str(scifact_dir))
      batches = list(
          pipeline.get_dataset(task, vocab, lengths, 16,
                               0).take(initialization.PCA_BATCHES).as_numpy_iterator())
      ids = [i for b in batches for i in (b["query_tokens"], b["doc_tokens"].reshape(-1, 64))]
      model = xtr_encoder.XTREncoder(
          backbone=t5.T5Encoder(hf_weights.t5_config_from_hf(hf_config.to_dict())), embed_dim=32)
      return xtr_encoder.pca_projection(model, saved["backbone"], ids)

    same_subspace = lambda a, b: np.allclose(np.abs(a.T @ b), np.eye(32), atol=1e-3)
    assert same_subspace(kernel, pca_of(sample_task or "msmarco_triples"))
    assert not same_subspace(kernel,
                             pca_of("beir_pairs" if sample_task is None else "msmarco_triples"))
    gin.clear_config()


def test_a_scanned_model_starts_from_unscanned_pretrained_weights(tmp_path, msmarco_triples_path,
                                                                  t5_spm_path):
  """The loader's T5Config is unscanned, the model's scanned and rematerialized: the trainer
  stacks the Hugging Face weights, and num_steps = 0 saves them so."""
  hf_config = _train_from_tiny_hf_t5(
      tmp_path, msmarco_triples_path, t5_spm_path, 0, """
      t5.T5Encoder.config = @scanned/t5.T5Config()
      scanned/t5.T5Config.scan_layers = True
      scanned/t5.T5Config.remat_policy = 'full'""")
  from xtr.models import encoding  # pylint: disable=g-import-not-at-top
  saved = encoding.load_params(str(tmp_path / "model"))
  expected = hf_weights.t5_params_from_hf(hf_weights.read_safetensors(tmp_path / "hf"),
                                          hf_weights.t5_config_from_hf(hf_config.to_dict()))
  assert "layers_0" in expected and "layers" in saved["backbone"]
  jax.tree.map(np.testing.assert_array_equal, saved["backbone"], layer_stack.stack(expected))


def test_resume_needs_no_pretrained_weights(tmp_path, msmarco_triples_path, t5_spm_path, capsys):
  """A resumed run takes every parameter from its checkpoint: the pretrained weights (and the
  PCA of their token vectors) are not loaded again, so they may be gone."""
  bindings = [
      f"MODEL_DIR = '{tmp_path}'", f"TRIPLES_PATH = '{msmarco_triples_path}'",
      f"T5_SPM_PATH = '{t5_spm_path}'", "trainer.train.num_steps = 2",
      "checkpoints.Checkpointer.save_every_steps = 1"
  ]
  train = lambda *extra: _train_smoke_in_process(*bindings, *extra)
  reference = jax.device_get(train().params)
  missing = f"""from __gin__ import dynamic_registration
      from xtr.models import hf_weights
      from xtr.models import layer_stack
      from xtr.models import t5
      from xtr.training import initialization
      initialization.Initialization.pretrained_backbone = @hf_weights.load_t5_backbone
      initialization.Initialization.projection_init = 'pca'
      hf_weights.load_t5_backbone.path = '{tmp_path / 'missing'}'
      hf_weights.load_t5_backbone.config = @t5.T5Config()"""
  with pytest.raises(FileNotFoundError):
    train(missing, f"MODEL_DIR = '{tmp_path / 'fresh'}'")
  resumed = jax.device_get(train(missing).params)
  assert f"Resumed from {tmp_path} at step 2." in capsys.readouterr().out
  jax.tree.map(np.testing.assert_array_equal, resumed, reference)


@pytest.mark.parametrize(
    "run,bindings,gate",
    [
        ("aligner_minilm_scifact", [], salience.Salience("relu")),  # chosen on dev
        ("aligner_msmarco", ["MODEL_DIR = 'm'", "TRIPLES_PATH = 't'", "PRETRAINED_PATH = 'p'"
                            ], salience.Salience("entropy_lp", 0.5, 0.4, 0.002)),  # the paper's
    ])
def test_aligner_run_configs_train_aligner_with_salience(run, bindings, gate):
  """The ALIGNER run files parse and configure top-1 ALIGNER training with their gate."""
  from tests import retrieval_setup  # pylint: disable=g-import-not-at-top
  gin.clear_config()
  try:
    gin.parse_config_files_and_bindings([str(REPO / f"gin/runs/{run}.gin")],
                                        [*bindings, "_gin_model.model = %MODEL"])
    model = retrieval_setup._gin_model()  # pylint: disable=protected-access
    assert gin.query_parameter("objective.Objective.scoring") == "aligner"
    assert model.salience == gate
    assert str(
        gin.query_parameter("objective.Objective.alignment").scoped_configurable_fn()) == "top_k:1"
  finally:
    gin.clear_config()


def test_distillation_starts_at_zero_for_the_teacher_itself(tmp_path, msmarco_triples_path,
                                                            t5_spm_path, capsys):
  """The model is the pretrained backbone without projection and k_train keeps every token of
  the batch (f_XTR = f_ColBERT): at step 1 the student is its own teacher (KL 0); training then
  moves it away, and the KL term grows."""
  _train_from_tiny_hf_t5(
      tmp_path, msmarco_triples_path, t5_spm_path, 20, f"""
      objective.Objective.distillation = 1.0
      objective.Objective.k_train = {16 * 2 * 64}
      xtr_encoder.XTREncoder.embed_dim = None""")
  kl = [float(x) for x in re.findall(r"distillation_kl ([0-9.e-]+) \|", capsys.readouterr().out)]
  assert len(kl) == 3 and kl[0] < 1e-5 < kl[-1], kl  # Steps 1, 10, 20.
  _train_from_tiny_hf_t5(tmp_path, msmarco_triples_path, t5_spm_path, 22, f"""
      objective.Objective.distillation = 1.0
      objective.Objective.k_train = {16 * 2 * 64}
      xtr_encoder.XTREncoder.embed_dim = None""")  # A resumed run loads its teacher again.
  assert f"Resumed from {tmp_path / 'model'} at step 20." in capsys.readouterr().out


def test_distillation_needs_a_teacher(tmp_path, msmarco_triples_path, t5_spm_path):
  with pytest.raises(
      ValueError,
      match=r"distillation=0.5 needs initialization.Initialization.pretrained_backbone"):
    _train_smoke_in_process(f"MODEL_DIR = '{tmp_path}'", f"TRIPLES_PATH = '{msmarco_triples_path}'",
                            f"T5_SPM_PATH = '{t5_spm_path}'",
                            "objective.Objective.distillation = 0.5")


def test_a_second_run_into_one_model_dir_is_refused(tmp_path, msmarco_triples_path, t5_spm_path):
  """Held by a live run (here: this process's lock), the model dir refuses a second run before
  its mesh or data exist; the first run's lock file is left as it was."""
  lock_path = tmp_path / trainer.TRAIN_LOCK
  with io.Lock(str(lock_path), "training", str):
    held = lock_path.read_bytes()
    with pytest.raises(
        io.LockedError, match=rf"{tmp_path} is being trained by another run "
        rf"\(training by process {os.getpid()} on .*\); wait for it"):
      _train_smoke_in_process(f"MODEL_DIR = '{tmp_path}'",
                              f"TRIPLES_PATH = '{msmarco_triples_path}'",
                              f"T5_SPM_PATH = '{t5_spm_path}'")
    assert lock_path.read_bytes() == held
    assert not (tmp_path / "checkpoints").exists()
  assert not lock_path.exists()


@pytest.mark.parametrize("vocabulary", ["fifo", "garbage", "too large"])
def test_a_vocabulary_the_model_cannot_embed_is_refused_before_any_data(
    tmp_path, msmarco_triples_path, t5_spm_path, vocabulary):
  """A T5_SPM_PATH that is a FIFO hung `xtr-train` inside tf.data, garbage failed there in a
  traceback that did not name the file, and a vocabulary of more pieces than the model's
  embedding rows trained on ids past its table."""
  path, rows, message = tmp_path / "spiece.model", 32128, ""
  if vocabulary == "fifo":
    os.mkfifo(path)
    message = "is a FIFO, not a regular file"
  elif vocabulary == "garbage":
    path.write_bytes(b"\x00\x01forged")
    message = "is not a SentencePiece model"
  else:
    path, rows = t5_spm_path, 32000  # 32,000 pieces and 100 sentinels.
    message = ("has 32,100 tokens, more than the 32,000 rows of the model's embedding table "
               r"\(vocab_size\)")
  with pytest.raises((ValueError, io.UnsafeFileError), match=f"{re.escape(str(path))}:? {message}"):
    _train_smoke_in_process(f"MODEL_DIR = '{tmp_path / 'model'}'",
                            f"TRIPLES_PATH = '{msmarco_triples_path}'", f"T5_SPM_PATH = '{path}'",
                            f"t5.T5Config.vocab_size = {rows}")
  assert not (tmp_path / "model").exists()


def test_a_preemption_notice_raises_preempted_after_saving_its_step(tmp_path, msmarco_triples_path,
                                                                    t5_spm_path):
  """`trainer.train` returned normally after a SIGTERM, so `xtr-demo` went on to interpolate,
  export and evaluate the step it stopped at, and wrote that model's metrics, exit 0."""

  def sigterm_at_step_2(step, *unused):
    if step == 2:
      os.kill(os.getpid(), signal.SIGTERM)
    return {}

  gin.clear_config()
  gin.parse_config_files_and_bindings([str(REPO / "gin/runs/smoke_msmarco.gin")], [
      f"MODEL_DIR = '{tmp_path}'", f"TRIPLES_PATH = '{msmarco_triples_path}'",
      f"T5_SPM_PATH = '{t5_spm_path}'", "trainer.train.num_steps = 6"
  ])
  try:
    with pytest.raises(trainer.Preempted) as preempted:
      trainer.train(evaluator=sigterm_at_step_2)
  finally:
    gin.clear_config()
  assert preempted.value.code == 0 and _steps(tmp_path) == [2]


def _saved_run(directory: pathlib.Path, seed: int) -> pathlib.Path:
  """A run saved at step 1, its state {"w": 10,000 random floats of `seed`} (40 kB: a data file
  apart from the tree's nodes); its checkpoints/."""
  checkpointer = checkpoints.Checkpointer(str(directory), async_save=False)
  w = np.random.default_rng(seed).random(10_000, np.float32)
  checkpointer.maybe_save(1, {"w": w}, iter(tf.data.Dataset.range(3)), force=True)
  checkpointer.close()
  return directory / "checkpoints"


def test_a_resume_refuses_a_link_or_fifo_in_the_checkpoints_before_orbax_reads_them(
    tmp_path, monkeypatch):
  """A step planted as a link to another run's step was resumed from (the other run's state); a
  FIFO in a step hung the resume (orbax's CheckpointManager waited on it)."""
  steps = _saved_run(tmp_path / "run", 0)
  planted = steps / "2"
  planted.symlink_to(_saved_run(tmp_path / "other", 1) / "1")
  with pytest.raises(io.UnsafeFileError, match=f"^{re.escape(str(planted))} is a symbolic link"):
    checkpoints.Checkpointer(str(tmp_path / "run"))
  planted.unlink()
  fifo = steps / "1" / "_CHECKPOINT_METADATA"
  fifo.unlink()
  os.mkfifo(fifo)
  monkeypatch.setattr(checkpoints.ocp, "CheckpointManager",
                      lambda *_, **__: pytest.fail("orbax reads the checkpoints"))
  with pytest.raises(io.UnsafeFileError, match=f"^{re.escape(str(fifo))} is a FIFO"):
    checkpoints.Checkpointer(str(tmp_path / "run"))


def test_a_resume_from_a_truncated_checkpoint_is_refused_naming_it(tmp_path):
  """Orbax's bare Exception of many lines; now a ValueError (exit status 2) naming the step."""
  step = _saved_run(tmp_path / "run", 0) / "1"
  data = max((step / "state" / "ocdbt.process_0" / "d").iterdir(), key=os.path.getsize)
  os.truncate(data, data.stat().st_size // 2)
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])  # A sharding, as the trainer's.
  abstract = {"w": jax.ShapeDtypeStruct((10_000,), np.float32, sharding=device)}
  checkpointer = checkpoints.Checkpointer(str(tmp_path / "run"))
  with pytest.raises(ValueError) as refused:
    checkpointer.restore_latest(abstract, iter(tf.data.Dataset.range(3)))
  assert re.fullmatch(
      re.escape(f"The checkpoint {step} is damaged and cannot be read (") + r"[A-Z_]+: .*" +
      re.escape("): restore it from a copy, or remove it and rerun to resume from the run's "
                "previous step."), str(refused.value))
