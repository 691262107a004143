"""The launch scripts, run against fake `gcloud` and `srun` that record their arguments: each
host runs the named tool with --multihost and the user's flags, quoted."""
import os
import pathlib
import stat
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def _launch(tmp_path, script: str, *args: str) -> str:
  """Runs launch/`script` with a fake gcloud and srun first on PATH; returns what they got."""
  record = tmp_path / "argv"
  for fake in ("gcloud", "srun"):
    path = tmp_path / fake
    path.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {record}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
  subprocess.run(["bash", str(REPO / "launch" / script), *args], check=True, env={
      **os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"
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
  argv = _launch(tmp_path, script, "--out=/shared/index").splitlines()
  assert argv == ["--ntasks-per-node=1", f".venv/bin/{tool}", "--multihost", "--out=/shared/index"]
