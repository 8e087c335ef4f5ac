#!/bin/bash
# ncu stall reasons (per issued instruction) of one launch of each named form (qwen2.5-7b 32 x 4k fp8, block 16).
set -u
export PYTHONPATH=$PWD
i=0
for form in ${PFORMS:-8:2:2:1 8:1:-4:1 8:1:1:1}; do
  i=$((i+1))
  PROBE=.fi/regt/probe.py FORMS=$form timeout 150 ncu --clock-control none -k regex:regt_decode --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section SchedulerStats \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
    python3 docs/data/candidates-h200-2026-12-04/register-decode/prof.py > $OUT/stalls-$i.txt 2>&1
  echo "form $form exit $?" >> $OUT/stalls-$i.txt
  grep -E "form|Duration|DRAM Throughput|Issued Warp|stalled" $OUT/stalls-$i.txt | grep -v " 0$\| 0\.0[0-9]$" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | cut -c1-100
done
