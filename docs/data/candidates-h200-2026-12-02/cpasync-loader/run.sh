# The device call (nvidia-h200, 2026-12-02 ~18:20 UTC, main c193af6; the probe ran from .fi/cpasync/probe.py)
nvidia-smi -L > $OUT/gpu.txt; nvidia-smi --query-gpu=driver_version,clocks.max.sm --format=csv >> $OUT/gpu.txt
git log -1 --format=%h >> $OUT/gpu.txt
PYTHONPATH=. timeout 580 python .fi/cpasync/probe.py > $OUT/probe.log 2>&1
