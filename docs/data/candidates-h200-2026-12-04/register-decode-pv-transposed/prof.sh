#!/bin/bash
# ncu on one launch of each named regt_decode form (the qwen2.5-7b 32 x 4k fp8 decode over blocks of 16). It ran with
# the afternoon's prof.py beside the probe in .fi/regt/; from the repository, PROBE names this folder's probe.
set -u
export PYTHONPATH=$PWD
i=0
for form in ${PFORMS:-8:1:1:1 16:1:0:1}; do
  i=$((i+1))
  PROBE=${PROBE:-.fi/regt/probe.py} FORMS=$form timeout 200 ncu --clock-control none -k regex:regt_decode --launch-skip 1 --launch-count 1 \
    --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section InstructionStats \
    python3 docs/data/candidates-h200-2026-12-04/register-decode/prof.py > $OUT/ncu-$i.txt 2>&1
  echo "form $form exit $?" >> $OUT/ncu-$i.txt
  grep -v "^==PROF==" $OUT/ncu-$i.txt | grep -v '^\s*$' | grep -v -- "-----" | grep -v "^    [A-Z]*  " | cut -c1-150 | grep -E "Duration|Throughput|Ipc|Issue|Stall|stall|Warp Cycles|Registers|Pipe|pipeline|Active Warps|Eligible|Executed Inst|form|DRAM|L2 Hit|L1/TEX Hit" | head -60
done
