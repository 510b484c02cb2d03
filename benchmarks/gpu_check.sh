#!/usr/bin/env bash
# The CUDA checks for the memory issue, as one prepared script (run it on a machine with a GPU):
#   1. the original failure's shape on CUDA: 1-hour ES bars, batch size 1, 5 epochs, validation every epoch;
#   2. a larger model under --memory-budget 4GiB (enforced) with --batch-size auto, and an injected OOM;
#   3. the plan's predicted peak next to the measured one (memory.jsonl device_peak_mb of training batches);
#   4. --precision 32 / bf16 / 16-mixed speed and loss; 5. the benchmark's --device cuda mode.
# Usage: bash benchmarks/gpu_check.sh [OUT_DIR]    (needs ../shared/fixtures beside the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/foxhunt-gpu}
rm -rf "$out"; mkdir -p "$out"
fx=../shared/fixtures
sample=$(python -c "from foxhunt.data.sample import bundled_sample_path; print(bundled_sample_path())")
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"

echo "== 1. original failure scenario on CUDA (batch 1, 5 epochs)"
time foxhunt train --parquet-file $fx/es_fut_ohlcv1h_databento.parquet --batch-size 1 --validation-batch-size 1 \
  --epochs 5 --patience 5 --use-gpu --memory-log-every 25 --no-progress --run-dir "$out/scenario" 2>&1 | grep -v "^\[MEMORY\]"
foxhunt memory-report "$out/scenario"

echo "== 2. larger model, 4 GiB budget enforced, batch size auto, OOM injected at step 5 and val batch 3"
foxhunt plan-memory --parquet-file "$sample" --hidden-size 160 --encoder-length 252 --horizon 5 --device cuda \
  --memory-budget 4GiB
time FOXHUNT_FAULT_INJECT=oom@train:5,oom@val:3 foxhunt train --parquet-file "$sample" --hidden-size 160 \
  --encoder-length 252 --horizon 5 --epochs 1 --batch-size auto --memory-budget 4GiB --use-gpu \
  --memory-log-every 20 --max-train-batches 60 --no-progress --run-dir "$out/large" 2>&1 | grep -v "^\[MEMORY\] phase=.*_batch"
foxhunt memory-report "$out/large"

echo "== 3. predicted vs measured training-step peak on CUDA"
python - "$out/large" <<'PY'
import json, sys
run = sys.argv[1]
cfg = json.load(open(f"{run}/config.json"))
plan, bs = cfg["memory_plan"], cfg["resolved"]["batch_size"]
row = next(r for r in plan["rows"] if r["batch_size"] == bs)
recs = [json.loads(l) for l in open(f"{run}/memory.jsonl")]
peak = max(r["device_peak_mb"] for r in recs if r["phase"] == "train_batch")
pred = row["train"]["total"] / 2**20
print(f"batch {bs}: predicted train peak {pred:.0f} MiB, measured {peak:.0f} MiB, ratio {peak / pred:.3f}")
PY

echo "== 4. precision on CUDA: 32 vs bf16 (the auto default) vs 16-mixed, same run otherwise"
for p in 32 bf16 16-mixed; do
  foxhunt train --parquet-file "$sample" --hidden-size 128 --encoder-length 168 --horizon 24 --batch-size 1024 \
    --epochs 1 --max-train-batches 40 --use-gpu --precision "$p" --no-progress --run-dir "$out/prec-$p" 2>&1 \
    | grep -E "^epoch|precision" | sed "s/^/$p: /"
done

echo "== 5. NVIDIA's electricity configuration (bf16, batch 1,024, hidden 128, encoder 168, horizon 24)"
python benchmarks/vs_pytorch_forecasting.py --device cuda
