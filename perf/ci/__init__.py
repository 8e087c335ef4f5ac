"""CI: GitHub Actions workflows generated from thresholds.yaml, and the GPU job run locally."""
