#!/usr/bin/env bash
# bench_checkpoint.sh: the training stall of checkpoint saves, synchronous vs asynchronous
# (checkpoint.async). Trains a GPT-2 124M-shaped model (12 layers, d_model 768; byte vocabulary,
# so 85M parameters and a ~1 GB checkpoint) three times: without saves, with synchronous saves
# and with asynchronous saves every few steps. Each console line is timestamped as it arrives;
# a step's time is the wall time between its step line and the previous one, so the step after
# a save carries that save's stall. Prints the mean step time of steps after a save and of the
# other steps, and the whole loop's time, per mode.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF2'
usage: scripts/bench_checkpoint.sh [--build DIR] [--steps S] [--interval I] [--np N] [--dir D]
                                   [--keep] [-- EXTRA --set ARGS...]
  --build DIR    the loom build (default build-cpu, else build)
  --steps S      optimizer steps per run (default 30); --interval I: a save every I steps (10)
  --np N         ranks (default 1: one rank, data parallel when more)
  --dir D        where checkpoints are written (default a temporary directory)
  --keep         keep the timestamped logs (their directory is printed)
EOF2
}

BUILD="" STEPS=30 INTERVAL=10 NP=1 DIR="" KEEP=0 EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --interval) INTERVAL="$2"; shift 2 ;;
    --np) NP="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_checkpoint: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
if [[ -z "$BUILD" ]]; then BUILD=build-cpu; [[ -x "$BUILD/bin/loom" ]] || BUILD=build; fi
LOOM="$BUILD/bin/loom"
[[ -x "$LOOM" ]] || { echo "bench_checkpoint: no $LOOM; build first (./scripts/build.sh)" >&2; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
if [[ $KEEP == 1 ]]; then echo "logs: $out"; else trap 'rm -rf "$out"' EXIT; fi
[[ -n "$DIR" ]] || DIR="$out"
mkdir -p "$out/text"
for f in /usr/share/common-licenses/*; do [[ -f "$f" ]] && cp "$f" "$out/text/$(basename "$f").txt"; done
"$BUILD/bin/loom-preprocess" --input "$out/text" --output-prefix "$out/corpus" --tokenizer bytes \
  --append-eod --workers 1 > /dev/null
cat > "$out/cfg.yaml" <<YAML
run: {name: bench_checkpoint}
model: {n_layer: 12, n_head: 12, d_model: 768, vocab_size: 257, seq_len: 64}
parallel: {micro_batch_size: 1, dp: 0}
train: {global_batch_size: $NP, steps: $STEPS, seed: 1, log_interval: 1, eval_interval: 0}
optimizer: {lr: 3.0e-4, warmup_steps: 2}
data: {train: ["$out/corpus"]}
checkpoint: {keep_last: 1, resume: none}
YAML

# Timestamps every line of stdin with bash's microsecond clock.
stamp() { while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done; }

printf '%-6s | %-16s | %-16s | %-8s | %s\n' mode "step after save" "other steps" "loop (s)" \
  "each save: training paused / written (s)"
for mode in none sync async; do
  interval=$INTERVAL async=false
  [[ $mode == none ]] && interval=0
  [[ $mode == async ]] && async=true
  log="$out/$mode.log"
  mpirun -np "$NP" --oversubscribe "$LOOM" train "$out/cfg.yaml" --set run.dir="$out/run_$mode" \
    --set checkpoint.dir="$DIR/ckpt_$mode" --set checkpoint.save_interval="$interval" \
    --set checkpoint.async="$async" "${EXTRA[@]}" 2>&1 | stamp > "$log"
  # Step lines "step  N/S | ...": after-save steps are those following a step that saved.
  awk -v iv="$interval" '
    / step +[0-9]+\/[0-9]+ \| loss / {
      match($0, / step +[0-9]+\//); s = substr($0, RSTART + 6, RLENGTH - 7) + 0;
      if (prev != "") {
        d = $1 - prev;
        if (iv > 0 && (s - 1) % iv == 0 && s > 1) { a += d; na++ } else if (s > 2) { o += d; no++ }
      } else first = $1;
      prev = $1; last = $1
    }
    END {
      printf "%s", (na ? sprintf("%8.2f s (%2d)", a / na, na) : "       -        ") " | ";
      printf "%8.2f s (%2d) | %8.1f\n", o / no, no, last - first
    }' "$log" | { read -r res; printf '%-6s | %s | ' "$mode" "$res"; }
  # Sync: "(N MB in T s, ...)"; async: "(N MB; training paused P s ...; ... in W s, ...)".
  sed -n 's/.*checkpoint saved: .*MB in \([0-9.]*\) s.*/\1/p; s/.*checkpoint saved: .*paused \([0-9.]*\) s.* in \([0-9.]*\) s,.*/\1 \/ \2/p' \
    "$log" | paste -sd, - | sed 's/,/, /g'
done
