#!/usr/bin/env bash
# srun directly inside salloc on the two-node test cluster (2 nodes x 2 tasks, dp2 x tp2): the
# run reaches its last step on 2 hosts; run again on its finished checkpoint, it trains nothing
# and its summary says so, with no nan (no division by zero steps).
# usage: test_salloc.sh LOOM_BINARY WORKDIR SOURCE_DIR
set -uo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
slurm_setup "$@"
make_corpus
cd "$src" || fail "cd $src"
# --wait=60 as in loom.sbatch: a task lost in MPI_Init ends the step within a minute.
run=(salloc -N2 --ntasks-per-node=2 --time=5 srun --mpi=pmix --distribution=block:block --wait=60 "$loom"
  train configs/tiny.yaml --set data.train="[$work/corpus]" --set parallel.dp=2
  --set parallel.tp=2 --set train.steps=4 --set checkpoint.save_interval=4
  --set checkpoint.resume=auto --set run.dir="$work/run" --set checkpoint.dir="$work/ck")
launch "$work/first.log" 300 "$work/run" "$work/ck" -- "${run[@]}" || fail "salloc + srun: $(tail -5 "$work/first.log")"
grep -q "4 ranks on 2 hosts" "$work/first.log" || fail "not 4 ranks on 2 hosts: $(grep -m1 ranks "$work/first.log")"
grep -q '"step":4,' "$work/run/metrics.jsonl" || fail "step 4 not reached"
echo "ok: salloc + srun --mpi=pmix ran 4 ranks on 2 hosts to step 4"
launch "$work/again.log" 300 -- "${run[@]}" || fail "rerun on a finished checkpoint: $(tail -5 "$work/again.log")"
grep -q "no steps to run (already at step 4)" "$work/again.log" ||
  fail "no 'no steps to run' summary: $(tail -3 "$work/again.log")"
grep -qiw -- "-\?nan" "$work/again.log" && fail "nan printed: $(grep -iw -- "-\?nan" "$work/again.log")"
echo "ok: rerun at train.steps trains nothing and prints no nan"
