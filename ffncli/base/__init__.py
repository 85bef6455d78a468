"""The ground floor: value checks, guarded file reading and atomic writing, strict JSON and
YAML. Imports nothing of ffncli but the errors, and never NumPy."""
