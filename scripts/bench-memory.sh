#!/usr/bin/env bash
# Peak memory of the reading commands on a big run: builds a store holding one run of N samples
# (default 7.5 million, the size that once took compare to 2.1 GB and report to 4 GB) and prints
# the peak resident set size and the wall time of compare, report, plot, export csv and export
# json on it, as /usr/bin/time measures them. Memory should stay flat whatever N is.
#
# usage: scripts/bench-memory.sh [SAMPLES]
#   PAGELAB=path/to/pagelab  measure that binary instead of building this checkout's release one
#   KEEP=1                   keep the scratch directory (its path is printed)
# needs: /usr/bin/time (GNU time) and the sqlite3 command-line shell.
set -euo pipefail
n=${1:-7500000}
for tool in /usr/bin/time sqlite3; do
  command -v "$tool" > /dev/null || { echo "$0: needs $tool" >&2; exit 1; }
done
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${PAGELAB:-}" ]; then
  cargo build --release -q -p pagelab --manifest-path "$root/Cargo.toml"
  PAGELAB="${CARGO_TARGET_DIR:-$root/target}/release/pagelab"
fi
work=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "scratch directory: $work" >&2 || trap 'rm -rf "$work"' EXIT
db="$work/big.db"

# pagelab makes the store (schema, run 1); the samples go in with one INSERT ... SELECT, one
# statement in one transaction, which is far quicker than importing a file of that size.
printf 'tasks,value\n1,100\n1,101\n' > "$work/seed.csv"
"$PAGELAB" --db "$db" import "$work/seed.csv" --label big --workload pft > /dev/null
start=$(date +%s)
sqlite3 "$db" <<SQL
WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < $n)
INSERT INTO samples (run_id, mode, tasks, metric, higher_is_better, repeat, seq, value)
SELECT 1, 'threads', 4, 'faults/sec', 1, 0, i, 1000000.0 + abs(random() % 100000) FROM seq;
SQL
printf 'store: %d samples in %d s, %d MB on disk\n' "$n" \
  $(( $(date +%s) - start )) $(( $(stat -c %s "$db") / 1048576 ))

measure() {
  local what=$1; shift
  /usr/bin/time -f '%M %e' -o "$work/time" "$PAGELAB" --db "$db" "$@" > /dev/null
  read -r kb secs < "$work/time"
  printf '%-12s peak RSS %6d MB  %6.1f s\n' "$what" $(( kb / 1024 )) "$secs"
  rm -rf "$work"/all.* # exports of millions of samples take gigabytes
}
measure compare compare big
measure report report big --out "$work/report"
measure plot plot big --metric faults/sec --out "$work/plot.svg"
measure "export csv" export --format csv --out "$work/all.csv"
measure "export json" export --format json --out "$work/all.json"
