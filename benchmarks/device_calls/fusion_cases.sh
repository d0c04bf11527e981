#!/bin/bash
# The fusion suite's own cases (issue 49's "none below 0.8x across the fusion suite"; last measured 2026-11-24).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g27; mkdir -p $O
timeout 200 python benchmarks/fusion/fusion_suite.py --cases fusion --out $O/fusion > $O/fusion.log 2>&1; echo "fusion rc=$?" >> $O/rc.txt
tar czf $OUT/g27.tgz -C $OUT g27; grep -v "INFO\|WARNING" $O/fusion.log | grep "^|\|geomean"; cat $O/rc.txt
