"""What the benchmark scripts share (common: fresh processes, round order, medians and ratios;
models: random-weight checkpoints and IR exports; genai_arms: our rung and LLMPipeline as arms;
results: the JSON result file).

A script in a topic folder reaches it by putting benchmarks/ on its path first, in one line:
``sys.path.insert(0, str(Path(__file__).resolve().parents[1]))``. No script imports another.
"""
