#!/usr/bin/env bash
# Jobs through scripts/slurm/loom.sbatch that must fail, not requeued: a config error (the one
# error naming the key in its output), and a task that dies before MPI_Init (no hang).
# usage: test_bad_config.sh LOOM_BINARY WORKDIR SOURCE_DIR
set -uo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
slurm_setup "$@"
read -r id state < <(run_job bad 120 -N2 --ntasks-per-node=2 scripts/slurm/loom.sbatch \
  configs/tiny.yaml --set train.no_such_key=1)
out="$work/bad-$id.out"
cat "$out"
[ "$state" = FAILED ] || fail "job $id ended $state, not FAILED"
[ "$(job_field "$id" Restarts)" = 0 ] || fail "job $id was requeued"
n=$(grep -c "error:.*no_such_key" "$out")
[ "$n" = 1 ] || fail "$n error lines naming train.no_such_key (want 1)"
grep -q "not requeued" "$out" || fail "no 'not requeued' line"
echo "ok: bad config: one error naming the key, job FAILED, not requeued"

# A task that dies before MPI_Init (task 3 of 4 ends itself with SIGSEGV): the tasks that reached
# MPI_Init wait for it and would never end by themselves; srun --wait=60 (loom.sbatch) ends them
# a minute later, and the job fails, not requeued.
cat > "$work/dies.sh" <<'SH'
#!/usr/bin/env bash
[ "${SLURM_PROCID:-}" = 3 ] && kill -SEGV $$
exec "$LOOM_REAL_BIN" "$@"
SH
chmod +x "$work/dies.sh"
t0=$SECONDS
export LOOM_REAL_BIN="$LOOM_BIN"
id=$(export LOOM_BIN="$work/dies.sh"; submit --output="$work/dies-%j.out" -N2 \
  --ntasks-per-node=2 scripts/slurm/loom.sbatch configs/tiny.yaml --set run.dir="$work/run2")
state=$(wait_job "$id" 180)
out="$work/dies-$id.out"
job_story "$out"
[ "$state" = FAILED ] || fail "job $id with a task dead at start-up ended $state, not FAILED"
[ "$(job_field "$id" Restarts)" = 0 ] || fail "job $id was requeued"
grep -q "not requeued" "$out" || fail "no 'not requeued' line"
echo "ok: a task dead before MPI_Init ends the job in $((SECONDS - t0)) s: FAILED, not requeued"
