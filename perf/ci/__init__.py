"""CI: GitHub Actions workflows generated from thresholds.yaml, the GPU job run locally, the PR comment."""
