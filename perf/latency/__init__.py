"""Latency: time kernels on a GPU, A/B a change against its base, measure the noise."""
