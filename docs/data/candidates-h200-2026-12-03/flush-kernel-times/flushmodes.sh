# One device call on `nvidia-h200` (2026-12-03, about 09:00 UTC, main 1cade8c), with carry [".fi/flush"]:
# the script ran from that scratch folder as .fi/flush/flushmodes.py.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
python -c "import torch,triton;print(torch.__version__,triton.__version__)"   # 2.11.0+cu130 3.6.0
PYTHONPATH=. timeout 560 python .fi/flush/flushmodes.py

# Two more calls, about 09:50 UTC, the same carry (about 100 s held between them):
PYTHONPATH=. timeout 580 python .fi/flush/flush_noise.py
(nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 100 > $OUT/clocks.csv 2>&1 &)
PYTHONPATH=. timeout 500 python .fi/flush/flush_why.py
