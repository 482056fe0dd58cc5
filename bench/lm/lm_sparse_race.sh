#!/bin/bash
# The race on the kit's sparse-reward held-out tasks, as the user runs it, beside GRPOTrainer:
# bf16 on both sides, each system's whole command (start and evaluations included), each
# stopping at its first held-out evaluation at or past the task's target, the systems
# alternating from one seed to the next. The targets, T_max, budgets and evaluation spacing are
# the earlier races' (docs/measurements/lm.md, *The held-out tasks as the user runs them*),
# fixed before any of these ran; the seeds are given, fresh ones (no default chosen on them).
#
#   make kit peers
#   bash bench/lm/lm_sparse_race.sh OUTDIR "46 47 48 49 50"
#   python bench/lm/lm_real_race.py report OUTDIR/TASK.json --target T
set -euo pipefail
out=${1:?OUTDIR}; seeds=${2:?SEEDS}
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
#     task     T_max updates eval target
while read -r task tmax updates every target; do
  python bench/lm/lm_real_race.py run --tasks "$task" --t-max "$tmax" --reward correct \
    --seeds $seeds --updates "$updates" --eval-every "$every" --dtype bfloat16 \
    --stop-at "$target" --json "$out/$task.json"
done <<'TASKS'
antonym  16 36 3 0.5
json     16 20 2 0.95
multiply 8  12 3 0.5
TASKS
