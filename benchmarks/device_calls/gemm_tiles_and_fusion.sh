#!/bin/bash
# The GEMM-epilogue tiles probe (a GroupNorm's 128-column tile at block_m 256, stages) and the fusion suite's
# own cases (issue 49's "across the fusion suite": last measured 2026-11-24).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g24; mkdir -p $O
timeout 200 python benchmarks/gemm_tiles/probe.py --out $O/probe --budget 170 \
  --settings block_m=256,block_m=256+stages=3,stages=3 red:gemm_groupnorm_large red:gemm_groupnorm \
  > $O/probe.log 2>&1; echo "probe rc=$?" >> $O/rc.txt
timeout 330 python benchmarks/fusion/fusion_suite.py --cases fusion --out $O/fusion > $O/fusion.log 2>&1; echo "fusion rc=$?" >> $O/rc.txt
tar czf $OUT/g24.tgz -C $OUT g24; grep "^|" $O/probe.log; grep -v "INFO\|WARNING" $O/fusion.log | tail -n 18; cat $O/rc.txt
