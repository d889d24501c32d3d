#!/usr/bin/env bash
# page_fault1 on the host kernel, will-it-scale's own binaries against pagelab's host target,
# back to back and alternating, so that both see the same machine state. will-it-scale's
# output is imported into the same store and the two are compared mmtests-style.
#
# usage: scripts/will-it-scale-back-to-back.sh WILL_IT_SCALE_DIR [ROUNDS] [TASKS...]
#   WILL_IT_SCALE_DIR holds page_fault1_processes and page_fault1_threads, built from
#   will-it-scale's sources (`make` there; it needs hwloc's development package).
set -euo pipefail
wis=${1:?usage: $0 WILL_IT_SCALE_DIR [ROUNDS] [TASKS...]}
rounds=${2:-3}
shift $(( $# >= 2 ? 2 : 1 ))
tasks=("$@")
[ ${#tasks[@]} -eq 0 ] && tasks=(1 2)
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release -q -p pagelab --manifest-path "$root/Cargo.toml"
pagelab="$root/target/release/pagelab"
work=$(mktemp -d)
db="$work/back-to-back.db"
for round in $(seq "$rounds"); do
  for mode in processes threads; do
    for t in "${tasks[@]}"; do
      echo "round $round: $mode, $t task(s)" >&2
      out="$work/page_fault1_${mode}-$t-$round.txt"
      # will-it-scale prints six warm-up seconds, then -s measured ones; pagelab does the same.
      "$wis/page_fault1_$mode" -t "$t" -s 5 > "$out"
      "$pagelab" --db "$db" import "$out" --label will-it-scale --format will-it-scale \
        --workload page_fault1 --mode "$mode" --tasks "$t" > /dev/null
      "$pagelab" --db "$db" run page_fault1 --target kernel --mode "$mode" --tasks "$t" \
        --samples 5 --warmup 6 --label pagelab-host > /dev/null
    done
  done
done
"$pagelab" --db "$db" compare will-it-scale pagelab-host
echo "store: $db" >&2
