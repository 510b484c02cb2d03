#!/usr/bin/env bash
# Pass/fail checks for the memory issue and the out-of-memory ladder, as one prepared script. Every check prints a
# PASS/FAIL line with its measured number beside its threshold; the script exits 1 if any failed.
#   1. the original failure's shape: 1-hour ES bars, batch size 1, 5 epochs, validation every epoch: completes, and
#      memory is flat across every validation pass and across the run (< FLAT_MB);
#   2. the ladder driven by injected OOMs above size 1 (training step: retry, micro-batches 16, 8, 4; validation:
#      retry, batches 8, 4): completes with the clean run's losses (relative difference <= LOSS_RTOL);
#   3. the ladder at size 1: retry, activation checkpointing, optimizer state to the host (CUDA; on CPU the host is
#      the device, so the CPU path stops at checkpointing), and the issue's report: --validation-batch-size 1 with
#      oom@val:3 completes;
#   4. a real OOM: a batch far above what fits the 4 GiB budget (CUDA; on CPU the RLIMIT_AS test runs instead):
#      the ladder splits it and the run completes; no record's device peak above the budget;
#   5. prediction and 6. the memory probe under injected OOMs; 7. the non-finite guard;
#   INFO (FULL=1, not asserted): plan vs measured peak, precision, the benchmark's CUDA mode.
# On CUDA every training run is under --memory-budget 4GiB (enforced with set_per_process_memory_fraction).
# Usage: bash benchmarks/gpu_check.sh [OUT_DIR]    (needs ../shared/fixtures beside the repository)
#        DEVICE=cpu bash benchmarks/gpu_check.sh     (the CPU path: small models, the same checks where they apply)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/foxhunt-gpu}
rm -rf "$out"; mkdir -p "$out"
fx=../shared/fixtures
es=$fx/es_fut_ohlcv1h_databento.parquet
py=${PYTHON:-python}
fh() { "$py" -m foxhunt "$@"; }
DEVICE=${DEVICE:-cuda}
FLAT_MB=${FLAT_MB:-4}          # growth allowed across a validation pass and across the run
LOSS_RTOL=${LOSS_RTOL:-1e-5}   # laddered vs clean losses and forecasts
BUDGET_MB=4096
if [ "$DEVICE" = cuda ]; then
  dev=(--use-gpu --memory-budget 4GiB)
  small=(--hidden-size 64 --attention-heads 4 --encoder-length 64 --horizon 3 --no-progress --precision 32)
  FLAT_MB=${FLAT_MB_CUDA:-1}   # device_allocated_mb moves by allocator blocks only
else
  dev=(--device cpu --threads 1)
  small=(--hidden-size 8 --attention-heads 2 --encoder-length 16 --horizon 3 --no-progress)
fi
fails=0
faults() { local spec=$1; shift; FOXHUNT_FAULT_INJECT=$spec "$@"; }  # faults SPEC COMMAND...: injected faults
check() { "$py" benchmarks/gpu_check_assert.py "$@" || fails=$((fails + 1)); }
expect() {  # expect STATUS NAME COMMAND...: the command's exit status must be STATUS
  local want=$1 name=$2; shift 2
  "$@" > "$out/$name.log" 2>&1; local got=$?
  if [ "$got" = "$want" ]; then echo "PASS  $name: exit $got"; else
    echo "FAIL  $name: exit $got, expected $want (log: $out/$name.log)"; tail -3 "$out/$name.log"; fails=$((fails + 1)); fi
}
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
  torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"
echo "device $DEVICE, thresholds: flat < $FLAT_MB MiB, losses within $LOSS_RTOL, budget $BUDGET_MB MiB"

echo "== 1. original failure scenario (batch 1, 5 epochs, validation every epoch)"
cap=(); [ "$DEVICE" = cpu ] && cap=(--max-train-batches 40)
expect 0 scenario fh train --parquet-file $es "${small[@]}" "${dev[@]}" "${cap[@]}" --batch-size 1 \
  --validation-batch-size 1 --epochs 5 --patience 5 --memory-log-every 10 --run-dir "$out/scenario"
check flat "$out/scenario" "$FLAT_MB"
check budget "$out/scenario" $BUDGET_MB

echo "== 2. the ladder above size 1, injected at every rung"
base=(train --parquet-file $es "${small[@]}" "${dev[@]}" --epochs 2 --dropout 0 --batch-size 32
      --validation-batch-size 16)
expect 0 clean fh "${base[@]}" --run-dir "$out/clean"
expect 0 ladder faults oom@train:3x4,oom@val:2x3,oom@train:12 fh "${base[@]}" --run-dir "$out/ladder"
check same "$out/clean" "$out/ladder" "$LOSS_RTOL"
check rungs "$out/ladder" oom_retry oom_split oom_split oom_split oom_retry oom_halve oom_halve oom_retry
check budget "$out/ladder" $BUDGET_MB

echo "== 3. the ladder at size 1"
one=(train --parquet-file $es "${small[@]}" "${dev[@]}" --epochs 2 --dropout 0 --batch-size 1
     --validation-batch-size 16 --max-train-batches 12)
expect 0 clean1 fh "${one[@]}" --run-dir "$out/clean1"
if [ "$DEVICE" = cuda ]; then
  expect 0 ladder1 faults oom@train:4x3 fh "${one[@]}" --run-dir "$out/ladder1"
  check rungs "$out/ladder1" oom_retry oom_checkpointing oom_optimizer_to_host
else
  expect 0 ladder1 faults oom@train:4x2 fh "${one[@]}" --run-dir "$out/ladder1"
  check rungs "$out/ladder1" oom_retry oom_checkpointing
  expect 3 stop1 faults oom@train:4x3 fh "${one[@]}" --run-dir "$out/stop1"
fi
check same "$out/clean1" "$out/ladder1" "$LOSS_RTOL"
expect 0 val1 faults oom@val:3 fh "${one[@]}" --validation-batch-size 1 --run-dir "$out/val1"
check rungs "$out/val1" oom_retry

echo "== 4. a real out-of-memory error"
if [ "$DEVICE" = cuda ]; then
  sample=$("$py" -c "from foxhunt.data.io.sample import bundled_sample_path; print(bundled_sample_path())")
  expect 0 real fh train --parquet-file "$sample" --hidden-size 160 --encoder-length 252 --horizon 5 --epochs 1 \
    --batch-size 4096 --validation-batch-size 4096 "${dev[@]}" --max-train-batches 3 --no-progress \
    --run-dir "$out/real"
  check rungs "$out/real" oom_retry oom_split
  check budget "$out/real" $BUDGET_MB
  grep -h "reason=" "$out/real/train.log" | sed 's/.*reason=/  /' | head -8
else
  if "$py" -m pytest -q -p no:cacheprovider tests/train/test_real_oom.py > "$out/real.log" 2>&1; then
    echo "PASS  real: RLIMIT_AS allocation failure mid-forward recovered (tests/train/test_real_oom.py)"
  else echo "FAIL  real: tests/train/test_real_oom.py (log: $out/real.log)"; fails=$((fails + 1)); fi
fi

echo "== 5. prediction under injected OOMs (retry, batch 32, 16)"
pdev=cpu; [ "$DEVICE" = cuda ] && pdev=cuda
expect 0 predict fh predict --model "$out/clean" --parquet-file $es --device $pdev --batch-size 64 \
  --out "$out/fc-clean.parquet"
expect 0 predict-ladder faults oom@predict:2x3 fh predict --model "$out/clean" --parquet-file $es \
  --device $pdev --batch-size 64 --out "$out/fc-ladder.parquet"
check forecasts "$out/fc-clean.parquet" "$out/fc-ladder.parquet" "$LOSS_RTOL"

echo "== 6. the memory probe under injected OOMs (retry, then probe batches 1 and 4)"
faults oom@probe:2x2 fh plan-memory --parquet-file $es "${small[@]:0:8}" --device $pdev --memory-budget 4GiB > "$out/probe.log" 2>&1
if grep -q "at batch 1 and 4" "$out/probe.log"; then echo "PASS  probe: $(grep -o 'probe: [^)]*' "$out/probe.log")"
else echo "FAIL  probe: no 'at batch 1 and 4' in $out/probe.log"; fails=$((fails + 1)); fi

echo "== 7. non-finite guard"
expect 0 nan1 faults nan@train:3 fh "${base[@]}" --epochs 1 --run-dir "$out/nan1"
expect 4 nan5 faults nan@train:3x5 fh "${base[@]}" --epochs 1 --run-dir "$out/nan5"

if [ "${FULL:-0}" = 1 ] && [ "$DEVICE" = cuda ]; then
  echo "== INFO (not asserted): predicted vs measured training-step peak at batch auto, 4 GiB"
  fh train --parquet-file "$sample" --hidden-size 160 --encoder-length 252 --horizon 5 --epochs 1 --batch-size auto \
    "${dev[@]}" --memory-log-every 20 --max-train-batches 60 --no-progress --run-dir "$out/large" > "$out/large.log" 2>&1
  "$py" - "$out/large" <<'PY'
import json, sys
run = sys.argv[1]
cfg = json.load(open(f"{run}/config.json"))
plan, bs = cfg["memory_plan"], cfg["resolved"]["batch_size"]
row = next(r for r in plan["rows"] if r["batch_size"] == bs)
recs = [json.loads(l) for l in open(f"{run}/memory.jsonl")]
peak = max(r["device_peak_mb"] for r in recs if r["phase"] == "train_batch")
pred = row["train"]["total"] / 2**20
print(f"INFO  batch {bs}: predicted train peak {pred:.0f} MiB, measured {peak:.0f} MiB, ratio {peak / pred:.3f}")
PY
  for p in 32 bf16 16-mixed; do
    fh train --parquet-file "$sample" --hidden-size 128 --encoder-length 168 --horizon 24 --batch-size 1024 \
      --epochs 1 --max-train-batches 40 --use-gpu --precision "$p" --no-progress --run-dir "$out/prec-$p" 2>&1 \
      | grep -E "^epoch" | sed "s/^/INFO  $p: /"
  done
  "$py" benchmarks/vs_pytorch_forecasting.py --device cuda
fi

echo "== $fails check(s) failed"
[ "$fails" = 0 ]
