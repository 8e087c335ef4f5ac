"""Static gate: cross-compile every variant for every target and judge its resources."""
