#!/usr/bin/env bash
# A rank that never joins a collective: the watchdog (2 s) must end the job well before the
# stuck peer's 60 s, naming the call, the axis and the peer ranks.
# usage: test_watchdog.sh PROBE_BINARY
set -uo pipefail
start=$(date +%s)
out=$(timeout 50 mpirun -np 2 --oversubscribe --allow-run-as-root "$1" 2 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out" | grep "watchdog" | head -2
if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then echo "FAIL: exit $rc after ${elapsed}s"; exit 1; fi
if ! echo "$out" | grep -q "communication watchdog: all_reduce on world (world ranks 0,1) has waited"; then
  echo "FAIL: no diagnostic"; echo "$out" | head -20; exit 1
fi
if [ $elapsed -gt 30 ]; then echo "FAIL: took ${elapsed}s"; exit 1; fi
echo "ok: the job ended after ${elapsed}s with the diagnostic"
echo "1 passed, 0 failed"
