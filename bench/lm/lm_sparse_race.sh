#!/bin/bash
# The race on the kit's sparse-reward held-out tasks (antonym, json, multiply), as the user runs
# it, beside GRPOTrainer: lm_race_as_run.sh's race (its targets, T_max, budgets and evaluation
# spacing, fixed before any of these ran) on those three tasks and the seeds given, fresh ones
# (no default chosen on them).
#
#   make kit peers
#   bash bench/lm/lm_sparse_race.sh OUTDIR "51 52 53 54 55"
#   python bench/lm/lm_real_race.py report OUTDIR/TASK.json --target T
set -euo pipefail
exec bash "$(dirname "$0")/lm_race_as_run.sh" "${1:?OUTDIR}" "${2:?SEEDS}" "antonym json multiply"
