#!/bin/bash
# The three precisions of a pretrained model's update on the kit's held-out tasks, as the user
# runs them: float32, bfloat16 uncorrected, bfloat16 corrected (--importance-sampling
# sequence-mask at C = 3, what --importance-sampling auto takes in bf16). Each run is
# bench/lm/lm_real_defaults.py's (SmolLM2-135M-Instruct, lr 1e-5, G 8, 4 prompts, 30 updates,
# the exact-match reward, held-out exact match every 10), one JSON per run; the order of the
# settings alternates from one (task, seed) to the next.
#
#   make kit
#   bash bench/lm/lm_dtype_heldout.sh OUTDIR "antonym multiply" "21 22"
#   python bench/lm/lm_real_defaults.py report OUTDIR/*.json
set -euo pipefail
out=${1:?OUTDIR}; tasks=${2:-"antonym multiply"}; seeds=${3:-"21 22"}
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
k=0
for seed in $seeds; do for task in $tasks; do
  if [ $((k % 2)) -eq 0 ]; then order="f32 bf16 bf16is"; else order="bf16is bf16 f32"; fi
  for s in $order; do
    case $s in
      f32) extra='--dtype float32';;
      bf16) extra='--dtype bfloat16 --importance-sampling none';;
      bf16is) extra='--dtype bfloat16 --importance-sampling sequence-mask --importance-sampling-cap 3';;
    esac
    python bench/lm/lm_real_defaults.py run --candidates 1e-5:8:4 --reward correct \
      --tasks "$task" --seeds "$seed" --extra="$extra" --json "$out/${task}_${seed}_${s}.json"
  done
  k=$((k + 1))
done; done
