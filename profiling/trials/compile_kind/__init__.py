"""The compile experiment kind (`ab compile`, `ab calibrate`): rung IR exported once, one
fresh process per trial of the arm's interpreter compiling it, per-rung and per-pass endpoints.

kind          the kind as the engine runs it: experiment.json keys, analysis, report sections
experiment    the experiment: measure options, exported IR, arms, endpoints
run           running it from the command's options: arms, IR, trials, report
trial         the standalone trial script each arm's interpreter runs (standard library only)
meter         what a trial measures around each compile (loaded by path by trial.py)
trial_values  one value per trial from its repeated compiles, by a declared statistic
passes        per-pass endpoints (``--pass-profile``): ranked table, JSON, PNG
calibration   `ab calibrate`: the control against itself plus a known amount of CPU work
"""
