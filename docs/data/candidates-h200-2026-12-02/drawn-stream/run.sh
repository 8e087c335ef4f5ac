#!/bin/bash
# Lab, one device call: the drawn-pieces TMA stream probe.
set -u
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
timeout 400 python3 .fi/drawn/probe.py > $OUT/probe.log 2>&1
tail -40 $OUT/probe.log | cut -c1-260
