#!/usr/bin/env bash
# A config error submitted through scripts/slurm/loom.sbatch: the job fails with the one error
# naming the key in its output, and is not requeued.
# usage: test_bad_config.sh LOOM_BINARY WORKDIR SOURCE_DIR
set -uo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
slurm_setup "$@"
id=$(submit --output="$work/bad-%j.out" -N2 --ntasks-per-node=2 scripts/slurm/loom.sbatch \
  configs/tiny.yaml --set train.no_such_key=1 --set run.dir="$work/run")
state=$(wait_job "$id" 120)
out="$work/bad-$id.out"
cat "$out"
[ "$state" = FAILED ] || fail "job $id ended $state, not FAILED"
[ "$(job_field "$id" Restarts)" = 0 ] || fail "job $id was requeued"
n=$(grep -c "error:.*no_such_key" "$out")
[ "$n" = 1 ] || fail "$n error lines naming train.no_such_key (want 1)"
grep -q "not requeued" "$out" || fail "no 'not requeued' line"
echo "ok: bad config: one error naming the key, job FAILED, not requeued"
