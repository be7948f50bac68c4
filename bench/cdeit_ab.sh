#!/usr/bin/env bash
# Interleaved A/B of environment switches on fittrain's CDEIT (one GPU): each round runs every
# variant once, so clock and neighbour drift hit all of them alike; prints each run's
# bench/fittrain_summary.py line and, at the end, each variant's median images/s against the
# first variant's. A variant is a space-separated list of VAR=VALUE (or "default": none).
# Device machine, after a build (session 19's CDEIT A/B, docs/PERFORMANCE.md, ran this way):
#   BUILD=build-gpu bash bench/cdeit_ab.sh 32 2 default FT_RESIDUAL_NORM=forward "FT_ATTENTION=fittrain"
# STEPS (default 40; the median is taken after step STEPS/3), CDEIT_DIR (the synthetic set's
# folder, made when missing), OUT (logs; default /tmp/cdeit_ab); MODEL and IMAGE (default cdeit
# and 128: the synthetic set's side), DATA (a --data-path instead of the synthetic set),
# TRAIN_EXTRA (more flags for fittrain train); e.g. MODEL=cdeit-tiny DATA=images.npy,conds.npy
# TRAIN_EXTRA="--device cpu" tries the script on a CPU build.
set -uo pipefail
BATCH=${1:?usage: cdeit_ab.sh BATCH ROUNDS VARIANT...}
ROUNDS=${2:?usage: cdeit_ab.sh BATCH ROUNDS VARIANT...}
shift 2
[[ $# -ge 1 ]] || { echo "cdeit_ab.sh: no variants given" >&2; exit 2; }
BUILD=${BUILD:-build-gpu}
STEPS=${STEPS:-40}
MODEL=${MODEL:-cdeit}
IMAGE=${IMAGE:-128}
D=${CDEIT_DIR:-/tmp/ftcdeit}
OUT=${OUT:-/tmp/cdeit_ab}
mkdir -p "$D" "$OUT"
[[ -x $BUILD/fittrain ]] || { echo "cdeit_ab.sh: no $BUILD/fittrain (build first)" >&2; exit 2; }
S=${DATA:-$D/eit$([[ $IMAGE == 128 ]] || echo "$IMAGE")}
[[ -n ${DATA:-} || -f $S/mean.pth ]] || "$BUILD/fittrain" prepare --synthetic eit --image-size "$IMAGE" --train 512 --valid 16 --test 16 \
  --out "$S" >"$OUT/prepare.log" 2>&1 || { tail -5 "$OUT/prepare.log"; exit 2; }
R=$OUT/runs.jsonl
: >"$R"
for r in $(seq 1 "$ROUNDS"); do
  i=0
  for v in "$@"; do
    i=$((i + 1))
    name=v$i-r$r
    vars=()
    [[ $v == default ]] || read -r -a vars <<<"$v"
    rm -rf "${D:?}/$name"
    if env "${vars[@]}" "$BUILD/fittrain" train --task diffusion --model "$MODEL" --data-path "$S" \
      --global-batch-size "$BATCH" --devices 1 --max-steps "$STEPS" --eval-every 0 --ckpt-every 0 --log-every 5 \
      --warmup-steps 5 --results-dir "$D/$name" --metrics-file "$OUT/$name.jsonl" ${TRAIN_EXTRA:-} >"$OUT/$name.log" 2>&1; then
      python3 bench/fittrain_summary.py "$OUT/$name.jsonl" "$v" $((STEPS / 3)) | tee -a "$R"
    else
      echo "$name ($v) failed:"; tail -3 "$OUT/$name.log"
    fi
  done
done
python3 - "$R" "$@" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
variants = sys.argv[2:]
med = {}
for v in variants:
    xs = [r["images_per_s"] for r in runs if r["run"] == v]
    if xs:
        med[v] = statistics.median(xs)
base = med.get(variants[0])
for v in variants:
    if v in med:
        rel = f", {med[v] / base:.3f}x of '{variants[0]}'" if base else ""
        print(f"{v}: median {med[v]:.1f} images/s{rel}")
PY
