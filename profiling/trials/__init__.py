"""A/B trials: counterbalanced designs, fresh-process trial runs, paired statistics, reports.

design   which arm runs when (AB/BA alternation, Williams squares, warm-up)
stats    paired effects: mean, percent, paired-t CI, exact sign-flip p, wins, geometric ratio
runner   one fresh subprocess per trial, results appended as they complete
analysis endpoints pulled from trial results and paired per block against the control arm
report   markdown table in the seed's shape, JSON; plot: PNG of paired differences with CIs
experiment  experiment.json + trials.jsonl on disk: run, report, re-report (`ab report DIR`)
compile_ab / compile_trial    `compile-ahead ab compile`: OpenVINO installations side by side
pass_ab                       its per-pass endpoints (--pass-profile): ranked table, JSON, PNG
schedule_ab                   `compile-ahead ab schedule`: the seed's replicated I1-vs-I2 design
upstream_trial / baselines    OpenVINO's NPUW LLM pipeline (pyramid off/on) as schedule arms
"""
