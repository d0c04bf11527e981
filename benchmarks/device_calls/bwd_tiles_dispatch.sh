#!/bin/bash
# Attention backward at other tiles (benchmarks/flash_backward/variants.py: the TileLang example's 32-query
# block, 3 stages) after g44 found asynchronous GEMMs worth nothing; then lt.op's host time a training step
# after the eager op path (b3028a3; g42 measured 0.654 ms a step before it against 0.121 of GPU time).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g45; mkdir -p $O
timeout 330 python benchmarks/flash_backward/variants.py --out $O/variants --cases attention causal_attention \
  --variants default n32 stages3 > $O/variants.log 2>&1; echo "variants rc=$?" >> $O/rc.txt
timeout 130 python benchmarks/train_rows/dispatch_profile.py --steps 100 --out $O/dispatch rmsnorm_gain > $O/dispatch.log 2>&1; echo "dispatch rc=$?" >> $O/rc.txt
tar czf $OUT/g45.tgz -C $OUT g45; grep -v "INFO\|WARN" $O/variants.log | tail -n 12; grep -v "INFO\|WARNING" $O/dispatch.log | tail -n 25; cat $O/rc.txt
