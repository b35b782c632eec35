"""A/B trials: the engine (designs, fresh-process trial runs, paired statistics, reports)
and the experiment kinds it runs.

design      which arm runs when (AB/BA alternation, Williams squares, warm-up)
arms        ``--arm NAME=SPEC``: OpenVINO installations (interpreter, library path, version)
runner      one fresh subprocess per trial, results appended as they complete
analysis    endpoints pulled from trial results and paired per block against the control arm
stats       paired effects: mean, percent, paired-t CI, exact sign-flip p, wins, geometric ratio
power       what a comparison could have seen, and which changes are flagged
report      markdown table in the seed's shape, JSON; plot: PNG of paired differences with CIs
experiment  experiment.json + trials.jsonl on disk: run, report, re-report (`ab report DIR`), by
            the experiment's Kind (the engine names no kind: callers pass trials.kinds.KINDS)
pooling     runs of one experiment pooled into one analysis
compile_kind   `ab compile` / `ab calibrate`: OpenVINO installations' compile times side by side
schedule_kind  `ab schedule` / `ab baselines`: schedules (and upstream baselines) side by side
serve_kind     `ab serve`: serving compile policies side by side over one trace
kinds          every kind by its experiment.json name, the table callers hand the engine
"""
