#!/bin/bash
# Next session: the whole train suite in GPU time at HEAD (issue 50's geomean), outputs tarred (a call returns ~8 files at most).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g15; mkdir -p $O
timeout 540 python -m leantile bench --suite train --time-budget 420 --out $O/train > $O/train.log 2>&1; echo "train rc=$?" >> $O/rc.txt
tar czf $OUT/g15.tgz -C $OUT g15; grep -v "INFO\|WARNING" $O/train.log | tail -n 20; cat $O/rc.txt
