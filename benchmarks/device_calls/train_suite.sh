#!/bin/bash
# The whole train suite at HEAD: GPU time (issue 50's geomean) and "with launches" after the eager op path
# (b3028a3: g45 measured rmsnorm_gain's host time 0.654 -> 0.270 ms a step); outputs tarred.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g46; mkdir -p $O
timeout 560 python -m leantile bench --suite train --time-budget 400 --out $O/train > $O/train.log 2>&1; echo "train rc=$?" >> $O/rc.txt
tar czf $OUT/g46.tgz -C $OUT g46; grep -v "INFO\|WARNING" $O/train.log | tail -n 22; cat $O/rc.txt
