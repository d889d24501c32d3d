#!/usr/bin/env bash
# What lock statistics cost on the engine: `run pft --mode threads` with counting on and off,
# alternating run by run so that both see the same machine state, then the ratio of the two
# medians (and of each pair) of the faults/sec and faults/cpu metrics. Issue 12 asks for at most 2%.
#
# usage: scripts/bench-lockstat.sh [ROUNDS] [TASKS] [SIZE] [PROFILE] [SAMPLES]
#   defaults: 5 rounds, 2 tasks, 1G faulted per repetition, linux-6.7, 3 repetitions per run
# Each run is one figure (the harmonic mean of its repetitions' faults/sec, as pft reports).
set -euo pipefail
rounds=${1:-5}
tasks=${2:-2}
size=${3:-1G}
profile=${4:-linux-6.7}
samples=${5:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$root/target}
cargo build --release -q -p pagelab --manifest-path "$root/Cargo.toml"
pagelab="$target_dir/release/pagelab"
work=$(mktemp -d)
db="$work/lockstat.db"
for r in $(seq "$rounds"); do
  # Alternate which goes first, so that neither always runs on a warmer machine.
  if (( r % 2 )); then order="on off"; else order="off on"; fi
  for s in $order; do
    echo "round $r/$rounds: lock-stat $s" >&2
    "$pagelab" --db "$db" run pft --profile "$profile" --mode threads --tasks "$tasks" \
      --size "$size" --samples "$samples" --lock-stat "$s" --label "lockstat-$s" > /dev/null
  done
done
"$pagelab" --db "$db" export --format csv --out "$work/samples.csv"
python3 - "$work/samples.csv" "$profile" "$tasks" "$size" <<'PY'
import csv, statistics, sys
runs = {}
for row in csv.DictReader(open(sys.argv[1])):
    runs.setdefault((row["metric"], row["label"], int(row["run_id"])), []).append(float(row["value"]))
def per_run(metric, label):
    # One figure per run, as pft reports it: the harmonic mean of its repetitions.
    return [statistics.harmonic_mean(v) for (m, l, _), v in sorted(runs.items(), key=lambda kv: kv[0][2])
            if m == metric and l == label]
uptime = open("/proc/loadavg").read().split()[:3]
print(f"pft --mode threads --tasks {sys.argv[3]} --size {sys.argv[4]}, {sys.argv[2]}, alternating; load average now {' '.join(uptime)}")
# faults/sec is wall clock; faults/cpu divides by the tasks' CPU time, so time the host gave
# other processes is left out (spinning on a lock is still CPU time).
for metric in ("faults/sec", "faults/cpu"):
    on, off = per_run(metric, "lockstat-on"), per_run(metric, "lockstat-off")
    if not on or not off:
        continue
    pairs = [a / b for a, b in zip(on, off)]
    m_on, m_off = statistics.median(on), statistics.median(off)
    print(f" {metric}, {len(on)} runs each:")
    print(f"  lock-stat on : median {m_on:,.0f}  {[round(x) for x in on]}")
    print(f"  lock-stat off: median {m_off:,.0f}  {[round(x) for x in off]}")
    print(f"  on/off: ratio of medians {m_on / m_off:.4f} ({(m_on / m_off - 1) * 100:+.2f}%),"
          f" median of per-round ratios {statistics.median(pairs):.4f}")
PY
echo "store: $db" >&2
