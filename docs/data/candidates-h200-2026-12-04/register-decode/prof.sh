#!/bin/bash
set -u
export PYTHONPATH=$PWD
which ncu > $OUT/ncu.txt 2>&1
FORMS=${FORMS:-4:0:1:16,8:0:1:16} timeout 400 ncu --clock-control none -k regex:reg_decode --launch-skip 1 --launch-count 1 \
  --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section InstructionStats \
  python3 .fi/reg/prof.py > $OUT/ncu-1.txt 2>&1
echo "exit $?" >> $OUT/ncu-1.txt
grep -v "^==PROF==" $OUT/ncu-1.txt | grep -v '^\s*$' | grep -v -- "-----" | cut -c1-150 | tail -120
