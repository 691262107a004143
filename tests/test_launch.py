"""The launch scripts, run against fake `gcloud` and `srun` that record their arguments: each
host runs the named tool with --multihost and the user's flags, quoted."""
import json
import os
import pathlib
import stat
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def _launch(tmp_path, script: str, *args: str, path: pathlib.Path | None = None, **env) -> str:
  """Runs launch/`script` (or its copy at `path`) with a fake gcloud and srun first on PATH and
  `env` set; returns what they got, and srun its working directory first."""
  record = tmp_path / "argv"
  for fake in ("gcloud", "srun"):
    fake_path = tmp_path / fake
    fake_path.write_text(f'#!/usr/bin/env bash\n{{ [[ $0 == *srun ]] && pwd && echo '
                         f'"JAX_LOCAL_DEVICE_IDS=$JAX_LOCAL_DEVICE_IDS"; printf "%s\\n" "$@"; '
                         f'}} > {record}\n')
    fake_path.chmod(fake_path.stat().st_mode | stat.S_IXUSR)
  subprocess.run(["bash", str(path or REPO / "launch" / script), *args], check=True, env={
      **os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}",
      **env
  })
  return record.read_text()


@pytest.mark.parametrize("script,tool", [("tpu_pod.sh", "xtr-train"),
                                         ("export_tpu_pod.sh", "xtr-export")])
def test_tpu_pod_scripts_run_their_tool_on_every_worker(tmp_path, script, tool):
  argv = _launch(tmp_path, script, "my-tpu", "us-central2-b", "--out=/mnt/a b").splitlines()
  assert argv[:5] == ["compute", "tpus", "tpu-vm", "ssh", "my-tpu"]
  assert "--worker=all" in argv
  assert argv[-1] == f"cd ~/xtr && .venv/bin/{tool} --multihost --out=/mnt/a\\ b"


@pytest.mark.parametrize("script,tool", [("gpu_nodes.sh", "xtr-train"),
                                         ("export_gpu_nodes.sh", "xtr-export")])
def test_gpu_node_scripts_run_their_tool_once_per_node(tmp_path, script, tool):
  """Run directly, and as sbatch runs it (a copy in SLURM's spool directory, called from the
  repository): srun starts the tool in the repository, with every GPU of the node in
  JAX_LOCAL_DEVICE_IDS; from elsewhere, or without a count of GPUs, a one-line refusal."""
  argv = [
      str(REPO), "JAX_LOCAL_DEVICE_IDS=0,1,2,3,4,5,6,7", "--ntasks-per-node=1", f".venv/bin/{tool}",
      "--multihost", "--out=/shared/index"
  ]
  gpus = {"SLURM_GPUS_ON_NODE": "8"}
  assert _launch(tmp_path, script, "--out=/shared/index", **gpus).splitlines() == argv
  spooled = tmp_path / "spool" / "slurm_script"
  spooled.parent.mkdir()
  spooled.write_bytes((REPO / "launch" / script).read_bytes())
  assert _launch(tmp_path, script, "--out=/shared/index", path=spooled, SLURM_SUBMIT_DIR=str(REPO),
                 **gpus).splitlines() == argv
  for env in ({"SLURM_SUBMIT_DIR": str(tmp_path), **gpus}, {"SLURM_SUBMIT_DIR": str(REPO)}):
    with pytest.raises(subprocess.CalledProcessError) as refused:
      _launch(tmp_path, script, path=spooled, **env)
    assert refused.value.returncode == 2


@pytest.mark.parametrize("local_device_ids, visible", [("0,1,2,3,4,5,6,7", "0,1,2,3,4,5,6,7"),
                                                       (None, "0")])
def test_one_process_per_node_under_slurm_sees_the_gpus_it_is_given(local_device_ids, visible):
  """What `--multihost` makes of SLURM's variables for a task of `srun --ntasks-per-node=1`
  (SLURM_LOCALID 0): the GPUs of JAX_LOCAL_DEVICE_IDS, as the GPU launchers set it; without it,
  JAX's default, GPU 0 alone (the launchers trained and encoded on 1 of 8 GPUs per node)."""
  code = ("from absl import flags; import jax; from xtr import cli; hosts = cli.MultihostFlags(); "
          "flags.FLAGS(['xtr', '--multihost']); hosts.initialize(); "
          "print(jax.config.values['jax_cuda_visible_devices'])")
  env = {
      **os.environ, "SLURM_JOB_ID": "4242",
      "SLURM_STEP_NODELIST": "127.0.0.1",
      "SLURM_NTASKS": "1",
      "SLURM_PROCID": "0",
      "SLURM_LOCALID": "0",
      "SLURM_STEP_NUM_NODES": "1",
      "XLA_FLAGS": ""
  }
  env.pop("JAX_LOCAL_DEVICE_IDS", None)
  if local_device_ids:
    env["JAX_LOCAL_DEVICE_IDS"] = local_device_ids
  shown = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True,
                         text=True, check=True, timeout=120).stdout
  assert shown.splitlines()[-1] == visible


def test_generalization_tables_and_record_are_the_reports(tmp_path):
  """launch/generalization.py tables: each report's nDCG@10 in its row and column ("—" where
  nothing was measured), and --record holds every report under "<model>/<SET>"."""
  reports = {"zero/raw_384/scifact_test": 0.70654, "scifact_d384/wise_ft_0.7/nfcorpus_dev": 0.34416}
  for name, ndcg in reports.items():
    path = tmp_path / "out" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'{{"ndcg@10": {ndcg}, "command": "launch/generalization.py"}}')
  (tmp_path / "out" / "scifact_d384" / "unrelated.json").write_text("{}")
  script = [str(REPO / ".venv" / "bin" / "python"), str(REPO / "launch" / "generalization.py")]
  record = tmp_path / "record.json"
  shown = subprocess.run(
      [*script, "tables", str(tmp_path / "out"), f"--record={record}"], check=True,
      capture_output=True, text=True, cwd=REPO).stdout
  assert "| no projection (384) | 0.7065 | — | — | — |" in shown
  assert "| untuned backbone (384-d, 0 steps), for reference | — | — |" in shown
  assert "| **384-d, WiSE-FT α = 0.7 (the demo)** | — | 0.3442 |" in shown
  assert json.loads(record.read_text()) == {
      name: {
          "ndcg@10": ndcg,
          "command": "launch/generalization.py"
      } for name, ndcg in sorted(reports.items())
  }
  refused = subprocess.run(
      [*script, "tables", str(tmp_path / "out"), "--recrd=x.json"], capture_output=True, text=True,
      cwd=REPO)
  assert refused.returncode == 1 and "unknown option '--recrd=x.json'" in refused.stderr


def test_the_demo_time_budget_runs_make_demo_in_a_bare_clone_and_records_it(tmp_path):
  """launch/demo_time_budget.sh: `make demo` (here a fake that checks it runs in a clone without
  .venv or runs/ and writes a run record as xtr-demo does) under /usr/bin/time -v; the record is
  that run record with the wall clock, the peak RSS and time's report."""
  fake = tmp_path / "make"
  fake.write_text("#!/usr/bin/env bash\n"
                  '[[ "$1" == demo && -f Makefile && ! -e .venv && ! -e runs ]] || exit 3\n'
                  "mkdir -p runs/demo && sleep 1\n"
                  """echo '{"results": {"scifact": {}}, "step_seconds": {"train": 1.5}}' """
                  "> runs/demo/run.json\n")
  fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
  record = tmp_path / "budget.json"
  subprocess.run(["bash", str(REPO / "launch" / "demo_time_budget.sh"),
                  str(record)], check=True, env={
                      **os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"
                  })
  budget = json.loads(record.read_text())
  assert budget["results"] == {"scifact": {}} and budget["step_seconds"] == {"train": 1.5}
  assert 1 <= budget["wall_clock_s"] < 60 and budget["peak_rss_kb"] > 0
  assert "Command being timed: \"make demo\"" in budget["time_v"]
