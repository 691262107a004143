#!/usr/bin/env bash
# The time budget of `make demo` (docs/results.md, "The demo"; the README's first command): a
# bare clone of this checkout's HEAD (no .venv, no runs/; pip's wheel cache as this machine has
# it), `make demo` in it under /usr/bin/time -v, and a record of the two: the demo's run record
# (metrics, commit, gin config, data checksums, each step's seconds) with the wall clock and
# peak RSS of the whole `make demo`, setup included. Run it on an otherwise idle machine.
#
#   launch/demo_time_budget.sh RECORD     (e.g. docs/runs/demo_time_budget.json; ~25 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
record=$(realpath -m "$1")
work=$(mktemp -d)
git clone -q . "$work/xtr"
(cd "$work/xtr" && /usr/bin/time -v -o "$work/time.txt" make demo)
python3 - "$work" "$record" <<'PY'
import json, re, sys
work, record = sys.argv[1:]
time_v = open(f"{work}/time.txt").read()
h_m_s = re.search(r"Elapsed \(wall clock\) time.*: (.+)", time_v).group(1).split(":")
run = json.load(open(f"{work}/xtr/runs/demo/run.json"))
run |= {
    "command": "make demo (bare clone, /usr/bin/time -v; launch/demo_time_budget.sh)",
    "wall_clock_s": sum(float(v) * 60**i for i, v in enumerate(reversed(h_m_s))),
    "peak_rss_kb": int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_v).group(1)),
    "time_v": time_v
}
with open(record, "w", encoding="utf-8") as f:
  json.dump(run, f, indent=2, ensure_ascii=False)
print(f"Wrote {record}: {run['wall_clock_s']:.0f} s wall clock, steps {run['step_seconds']}")
PY
rm -rf "$work"
