#!/bin/bash
# The race as the user runs it on the kit's five held-out tasks, beside GRPOTrainer: bf16 on
# both sides, each system's whole command (start and evaluations included), each stopping at
# its first held-out evaluation at or past the task's target. The targets, T_max, budgets and
# evaluation spacing are the earlier races' (docs/measurements/lm.md, *The held-out tasks as the
# user runs them*, *The other three held-out tasks, as run*), fixed before any of these ran.
#
#   make kit peers
#   bash bench/lm/lm_race_as_run.sh OUTDIR "31" ["TASK ..."]
#   python bench/lm/lm_real_race.py report OUTDIR/TASK.json --target T
#
# The third argument races only the tasks it names (all five without it); DTYPE=float32 in the
# environment runs both sides in float32 (where the CPU emulates bf16).
set -euo pipefail
out=${1:?OUTDIR}; seeds=${2:-31}; only=${3:-}
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
#     task     T_max updates eval target
while read -r task tmax updates every target; do
  if [ -n "$only" ] && [[ " $only " != *" $task "* ]]; then continue; fi
  python bench/lm/lm_real_race.py run --tasks "$task" --t-max "$tmax" --reward correct \
    --seeds $seeds --updates "$updates" --eval-every "$every" --dtype "${DTYPE:-bfloat16}" \
    --stop-at "$target" --json "$out/$task.json"
done <<'TASKS'
plural   16 36 3 0.75
json     16 20 2 0.95
antonym  16 36 3 0.5
compare  8  36 3 0.7
multiply 8  12 3 0.5
TASKS
