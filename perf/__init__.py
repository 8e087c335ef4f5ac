"""The harness: scenarios, timing, A/B, statistics, thresholds, gates and reports."""
