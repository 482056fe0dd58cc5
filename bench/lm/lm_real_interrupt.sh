#!/usr/bin/env bash
# Ctrl-C on a real model: SmolLM2-135M-Instruct from the kit (`make kit`), finetune's defaults,
# the kit's `capital` task. One uninterrupted run of 6 updates (its peak resident memory from
# GNU time); one cut by SIGINT after its second update and resumed to 6. Prints the exit
# status, the seconds from the signal to the exit, and whether the two metrics.csv agree row
# for row. TASK picks another of the kit's tasks;
# EXTRA adds options to both runs (LoRA, micro-batches, bf16: then the resumed run is also
# exported, as the adapter and merged, and each export loaded back through peft/transformers).
#
#     bash bench/lm/lm_real_interrupt.sh [KIT] [OUT]
#     TASK=json EXTRA="--lora-r 16 --micro-batch-size 8 --dtype bfloat16 --lr 1e-4 \
#         --max-completion-length 16" bash bench/lm/lm_real_interrupt.sh
set -u
KIT=${1:-$HOME/.cache/eligibility-kit}
OUT=${2:-/tmp/eligibility-interrupt}
E=${ELIGIBILITY:-.venv/bin/eligibility}
T=$KIT/tasks
TASK=${TASK:-capital}
read -r -a EXTRA_ARGS <<< "${EXTRA:-}"
ARGS=("$T/rewards.py:reward" --eval-metric "$T/rewards.py:correct"
      --model "$KIT/models/smollm2-135m-instruct" --prompts "$T/$TASK/train.jsonl"
      --eval-prompts "$T/$TASK/heldout.jsonl" --eval-every 3 --checkpoint-every 100
      --target-accuracy none --no-progress --max-updates 6 "${EXTRA_ARGS[@]}")
rm -rf "$OUT" && mkdir -p "$OUT"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
/usr/bin/time -f %M -o "$OUT/straight.kib" "$E" finetune "${ARGS[@]}" --out "$OUT/straight" \
    > /dev/null 2> "$OUT/straight.err"
echo "uninterrupted: exit $?, peak resident memory $(( $(tail -1 "$OUT/straight.kib") / 1024 )) MiB"
"$E" finetune "${ARGS[@]}" --out "$OUT/cut" > /dev/null 2> "$OUT/cut.err" &
pid=$!
until [ -f "$OUT/cut/metrics.csv" ] && [ "$(wc -l < "$OUT/cut/metrics.csv")" -ge 3 ]; do
    sleep 0.2
done
sleep 1
t0=$(date +%s.%N)
kill -INT "$pid"
wait "$pid"
status=$?
echo "interrupted: exit $status, $(echo "$(date +%s.%N) - $t0" | bc) s after SIGINT"
tail -1 "$OUT/cut.err"
"$E" finetune --resume "$OUT/cut" --max-updates 6 > /dev/null 2> "$OUT/resumed.err"
echo "resumed: exit $?"
python3 - "$OUT" <<'PY'
import csv, sys
cols = ["update", "tokens", "mean_reward", "accuracy", "eval_accuracy", "loss", "kl"]
rows = [list(csv.DictReader(open(f"{sys.argv[1]}/{d}/metrics.csv"))) for d in ("straight", "cut")]
same = len(rows[0]) == len(rows[1]) and all(
    all(a[c] == b[c] for c in cols) for a, b in zip(*rows, strict=True)
)
print(f"{len(rows[0])} and {len(rows[1])} rows; identical on {', '.join(cols)}: {same}")
PY
if [ -n "${EXTRA:-}" ]; then
    "$E" export "$OUT/cut" "$OUT/adapter" > /dev/null 2> "$OUT/export.err"
    echo "export: exit $?"
    "$E" export "$OUT/cut" "$OUT/merged" --merge > /dev/null 2> "$OUT/merge.err"
    echo "export --merge: exit $?"
    python3 - "$OUT" "$KIT/models/smollm2-135m-instruct" <<'PY'
import sys
from pathlib import Path
from transformers import AutoModelForCausalLM
out, base = Path(sys.argv[1]), sys.argv[2]
for name in ("adapter", "merged"):
    if (out / name / "adapter_config.json").exists():
        from peft import AutoPeftModelForCausalLM
        model = AutoPeftModelForCausalLM.from_pretrained(out / name)
    else:
        model = AutoModelForCausalLM.from_pretrained(out / name)
    print(f"{name}: loads as {type(model).__name__}, {sum(p.numel() for p in model.parameters())} parameters")
PY
fi
tail -3 "$OUT/cut/metrics.csv" | cut -d, -f1,8
