"""The kernel family, one module per variant in the order of the paper."""
