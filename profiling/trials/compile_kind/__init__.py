"""The compile experiment kind (`ab compile`, `ab calibrate`): compile time per rung, OpenVINO
installation against OpenVINO installation (or configuration against configuration).

The rung graphs are built once with our builder and saved as IR (weights kept in their stored
precision). Every trial is one fresh process of the arm's interpreter running the standalone
trial.py, which reads the IR, re-marks the weight decompression and compiles each rung in
ladder order (``--repeat`` times, after ``--compile-warmup`` compiles), measuring each compile
(meter.py): wall, CPU time, instructions and cycles where the kernel counts them, peak RSS, and
with --pass-profile the passes' self time.

kind            the kind as the engine runs it: experiment.json keys, analysis, report sections
exported_rungs  the rung IR exported once, its ladder, the measure options of a trial
arms            its arms: each installation's trial command, the A/A copy, the collector env
endpoints       per-rung endpoints and the one the experiment leads with
run             running it from the command's options: arms, IR, trials, report
trial           the standalone trial script each arm's interpreter runs (standard library only)
meter           what a trial measures around each compile (loaded by path by trial.py)
trial_values    one value per trial from its repeated compiles, by a declared statistic
passes          per-pass endpoints (``--pass-profile``): ranked table, JSON, PNG
calibration     `ab calibrate`: the control against itself plus a known amount of CPU work
"""
