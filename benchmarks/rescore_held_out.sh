#!/usr/bin/env bash
# Score kept recordings again with the detector of this checkout, the three ways record_held_out.sh scored them
# (the metrics alone, the server's flags, the server's log), into OUT/hN[-full]-{first,flags,log}.json, for
# benchmarks/rescore_diff.py to set beside the files of the recording. RUNS holds the recordings (runs/hN, runs/hN-full).
#
#     bash benchmarks/rescore_held_out.sh runs runs/rescore 100 101 102
#     WAYS=first bash benchmarks/rescore_held_out.sh runs runs/rescore6 100 101   # the metrics alone only
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:?usage: rescore_held_out.sh RUNS OUT N...}"; out="${2:?usage: rescore_held_out.sh RUNS OUT N...}"; shift 2
mkdir -p "$out"
for n in "$@"; do
  for pass in quick full; do
    if [ "$pass" = quick ]; then quick=(--quick); name="h$n"; else quick=(); name="h$n-full"; fi
    [ -d "$runs/$name" ] || { echo "no recording $runs/$name: skipped"; continue; }
    for way in ${WAYS:-first flags log}; do
      case "$way" in first) stated=();; flags) stated=(--with-config);; log) stated=(--with-server-log);; esac
      python benchmarks/scenarios.py --set "held-out-$n" "${quick[@]}" --evaluate-only "${stated[@]}" \
        --out "$runs/$name" --json "$out/$name-$way.json" > /dev/null
    done
    echo "== rescored held-out $n $pass $(date -u +%H:%M:%S)"
  done
done
