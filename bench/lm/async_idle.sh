#!/bin/bash
# Sampling and learning at once, measured as run on an idle machine: updates per hour and the
# held-out target in wall time of `finetune` (sync), `finetune --max-staleness 1` and `2`
# (async-1, async-2: a sampler process beside the learner, `--importance-sampling exact`) and
# TRL's GRPOTrainer, on the kit's real models, each run a whole process of its own
# (bench/lm/lm_async.py run), the systems' order alternating from one seed to the next.
#
#   make kit peers          # SmolLM2-135M-Instruct, the tool model, TRL
#   bash bench/lm/async_idle.sh [OUTDIR]     # default bench/results
#
# Threads: sync's and TRL's process 2 (OMP_NUM_THREADS, set here and by lm_async.py for each
# child), each of async's two processes 1 (--async-threads 1: the two roles on two cores).
#
# What it runs (seeds 101-103: no default was chosen on them):
#   1. completions: the kit's `multiply` on SmolLM2-135M-Instruct, G 8 x 4 prompts, T_max 8,
#      12 updates, the held-out exact match every 3, target 0.5; seeds 101 and 102.
#   2. agent: the calculator (`multiply-tool-0`, bench/lm/calculator.py) on the kit's tool
#      model, each call made to take 0.5 s (--tool-delay 0.5), G 4 x 2 prompts, 48 tokens a
#      reply, one round of calls, 4 updates, the held-out success every 2, each run stopping at
#      its first held-out success >= 0.65 (the calculator race's target); seed 103.
#   3. the reports: per system, updates per hour and its paired ratio to sync, the training
#      seconds to the target and their ratios to sync's and TRL's, the accuracy by update.
#
# As run on 2026-11-29 (docs/measurements/lm.md, "Sampling and learning at once on an agent
# task with a slow tool"): the agent part with 6 updates and no --stop-at (every system reaches
# 0.65 at its first evaluation, so a stop there leaves too few updates to count), about 20
# minutes for the four systems; the completions part at these sizes does not learn (seed 101:
# sync and async-1 stopped by the run's guard after update 11, async-2 held-out 0), so its
# figures compare speed only.
#
# The agent part runs ours with every episode's tool calls of a turn at once (the default since
# --max-env-workers); what that buys against the calls one after another (the loop as it was
# measured above) is the same part again with `--max-env-workers 1` (ours only: TRL is not
# changed by it), about 8 more minutes by the estimate below (sync and async-1):
#   python bench/lm/lm_async.py run --setting agent --tool-delay 0.5 --seeds 103 --g 4 \
#     --prompts 2 --t-max 48 --max-tool-calls 1 --updates 6 --eval-every 3 \
#     --systems sync async-1 --max-env-workers 1 --json "$out/lm_async_agent_one.json"
#   python bench/lm/lm_async.py report "$out/lm_async_agent_one.json"
# (each file reported apart: the report groups rows by system name) and the updates per hour of
# sync and async-1 there set beside the same systems' in lm_async_agent.json's report.
#
# Expected duration on an idle 2-core machine: about 34 minutes in all. Estimated, not timed:
# the dry runs (`lm_async.py run --setting completions|agent --dry-run`, every system, seed 0,
# 2 updates at G 2 x 1 and T 4, an evaluation after each) show what each system's run does per
# update and per run (the processes it starts: one, or async's learner and sampler, each
# building the model; its sampling, scoring and step each update; its evaluations), and that
# each ends; the seconds of those steps are taken from the idle runs recorded in
# docs/measurements/lm.md at these settings, scaled by the rows an update samples and scores:
#   - completions, about 16 min. The `multiply` race as run (seeds 76-80, 12 updates, an
#     evaluation every 3, float32, 2 threads): a whole `finetune` process took 39-47 s, a whole
#     GRPOTrainer process 208-292 s. async-K starts two processes, each loading and probing the
#     model, at one thread each: counted at twice sync's, 90 s. A seed: 45 + 90 + 90 + 250 s,
#     about 8 min; two seeds about 16 min.
#   - agent, about 18 min. The calculator race (*The calculator without worked examples* and
#     *with the start evaluated*: G 8 x 2, float32, 2 threads): `finetune` 50-64 s an update
#     (about 18 s sampling, 40 s scoring), GRPOTrainer about 2x that, and 36-170 s a process
#     beyond its updates (its start and evaluations). Halved for G 4 x 2, plus 8 episodes x
#     0.5 s an update for the slow tool where the learner waits on it (sync, TRL): sync
#     4 x 34 + 80 s, about 3.5 min; async-1 and async-2 counted at 4 min each (the learner's
#     scoring at one thread, 1.9x slower than at two by the recorded thread scaling, with the
#     sampling and the tool's wait beside it); TRL 4 x 68 + 120 s, about 6.5 min.
# A run that reaches its target ends there (the agent's --stop-at), so this is an upper
# estimate; on a shared or slower machine it takes longer, and its figures are not idle ones.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/results}
mkdir -p "$out"
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 TOKENIZERS_PARALLELISM=false
systems=(sync async-1 async-2 trl)

python bench/lm/lm_async.py run --setting completions --seeds 101 102 --g 8 --prompts 4 \
  --t-max 8 --updates 12 --eval-every 3 --stop-at 0.5 --systems "${systems[@]}" \
  --json "$out/lm_async_completions.json"
python bench/lm/lm_async.py run --setting agent --tool-delay 0.5 --seeds 103 --g 4 --prompts 2 \
  --t-max 48 --max-tool-calls 1 --updates 6 --eval-every 3 \
  --systems "${systems[@]}" --json "$out/lm_async_agent.json"

python bench/lm/lm_async.py report "$out/lm_async_completions.json" --target 0.5
python bench/lm/lm_async.py report "$out/lm_async_agent.json" --target 0.65
