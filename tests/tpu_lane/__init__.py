"""TPU lane: tests against the real torch_tpu package (no TPU chip), run in the TPU venv."""
