#!/usr/bin/env bash
# bench_moe_balance.sh: does the MoE load-balancing loss balance the experts? Trains
# configs/moe_small.yaml on the prepared corpus twice, with model.moe.aux_loss_coef as
# configured and with 0, and prints per logged step the expert load of each run from
# metrics.jsonl: the busiest expert's share of a layer's assignments (1/E when uniform) and the
# coefficient of variation of the tokens per expert, averaged over layers.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF2'
usage: scripts/bench_moe_balance.sh [--build DIR] [--steps S] [--np N] [-- EXTRA --set ARGS...]
  --build DIR  the loom build (default build-cpu, else build)
  --steps S    optimizer steps per run (default 100); --np N ranks (default 8, the config's)
Needs the quickstart corpus (./scripts/prepare_corpus.sh, run by ./scripts/quickstart.sh).
EOF2
}

BUILD="" STEPS=100 NP=8 EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --np) NP="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_moe_balance: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
if [[ -z "$BUILD" ]]; then BUILD=build-cpu; [[ -x "$BUILD/bin/loom" ]] || BUILD=build; fi
LOOM="$BUILD/bin/loom"
[[ -x "$LOOM" ]] || { echo "bench_moe_balance: no $LOOM; build first (./scripts/build.sh)" >&2; exit 1; }
[[ -f data/corpus/kjv_train.idx ]] || { echo "bench_moe_balance: no corpus; run ./scripts/prepare_corpus.sh" >&2; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for coef in default 0; do
  sets=(--set train.steps="$STEPS" --set train.log_interval=10 --set train.eval_interval=0
        --set run.dir="$out/$coef" --set checkpoint.dir="$out/ckpt_$coef" --set checkpoint.resume=none)
  [[ "$coef" == 0 ]] && sets+=(--set model.moe.aux_loss_coef=0)
  mpirun --oversubscribe -np "$NP" --mca btl_tcp_if_include lo "$LOOM" train configs/moe_small.yaml \
    "${sets[@]}" "${EXTRA[@]}" > "$out/$coef.log" 2>&1 || { tail -20 "$out/$coef.log"; exit 1; }
done
python3 - "$out" <<'EOF2'
import json, statistics, sys
def load(path):
    rows = {}
    for line in open(path):
        j = json.loads(line)
        if "moe" in j:
            rows[j["step"]] = j
    return rows
def load_stats(row):
    top, cv = [], []
    for layer in row["moe"]["tokens_per_expert"]:
        n = sum(layer)
        top.append(max(layer) / n)
        mean = n / len(layer)
        cv.append(statistics.pstdev(layer) / mean)
    return sum(top) / len(top), sum(cv) / len(cv)
d = sys.argv[1]
on, off = load(d + "/default/metrics.jsonl"), load(d + "/0/metrics.jsonl")
E = len(next(iter(on.values()))["moe"]["tokens_per_expert"][0])
print("expert load per logged step, mean over layers (uniform: top share %.3f, cv 0)" % (1 / E))
print("%6s | %-32s | %-32s" % ("step", "aux_loss_coef as configured", "aux_loss_coef 0"))
print("%6s | %9s %6s %7s %7s | %9s %6s %7s %7s" % ("", "top share", "cv", "loss", "aux", "top share", "cv", "loss", "aux"))
for s in sorted(on):
    a, b = on[s], off.get(s)
    ta, ca = load_stats(a)
    line = "%6d | %9.3f %6.3f %7.4f %7.4f" % (s, ta, ca, a["loss"], a["moe"]["aux_loss"])
    if b:
        tb, cb = load_stats(b)
        line += " | %9.3f %6.3f %7.4f %7.4f" % (tb, cb, b["loss"], b["moe"]["aux_loss"])
    print(line)
EOF2
