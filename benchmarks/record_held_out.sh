#!/usr/bin/env bash
# Record one held-out set as docs/accuracy.md reports it: the quick pass, then the full pass, each scored at
# recording time from the metrics alone (runs/hN[-full]-first.json), then again with the server's flags
# (-flags.json) and with the server's log (-log.json), then prints its rows (held_out_table.py). Run it alone: the
# scenarios are timed on this host. The six score files are copied into benchmarks/held_out_scores/ to be committed:
# runs/ (the recordings, ~80 MB a set) is git-ignored and does not outlive its machine, the scores do.
#
#     bash benchmarks/record_held_out.sh 100 > runs/queue100.log 2>&1
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:?usage: record_held_out.sh N (a held-out set of benchmarks/scenario_sets.py)}"
mkdir -p runs
for pass in quick full; do
  if [ "$pass" = quick ]; then quick=(--quick); out="runs/h$n"; else quick=(); out="runs/h$n-full"; fi
  echo "== held-out $n $pass: recording $(date -u +%H:%M:%S)"
  python benchmarks/scenarios.py --set "held-out-$n" "${quick[@]}" --out "$out" --json "$out-first.json"
  python benchmarks/scenarios.py --set "held-out-$n" "${quick[@]}" --evaluate-only --with-config --out "$out" \
    --json "$out-flags.json"
  python benchmarks/scenarios.py --set "held-out-$n" "${quick[@]}" --evaluate-only --with-server-log --out "$out" \
    --json "$out-log.json"
done
echo "== held-out $n done $(date -u +%H:%M:%S)"
mkdir -p benchmarks/held_out_scores
for p in "" -full; do for w in first flags log; do cp "runs/h$n$p-$w.json" benchmarks/held_out_scores/; done; done
python benchmarks/held_out_table.py "$n"   # the set's rows as docs/accuracy.md gives them
