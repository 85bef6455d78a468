"""The ground floor: value checks, guarded file reading and atomic writing, strict JSON and
YAML. Imports nothing of ffncli but the errors, and never NumPy."""

# How many of a text's first tokens calibrate a threshold (--target-sparsity, perplexity's
# cuts): stated here, NumPy-free, so that the command line's help states it too;
# ffncli.analysis.calibration applies it.
CALIBRATION_TOKENS = 4096
