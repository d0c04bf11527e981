#!/bin/bash
# The LM head + cross-entropy's training step at 96 MiB chunks (bb51c59) with intermediates in shared bytes
# (3ab6c1b): time and peak memory against torch.compile (issue 50: a quarter of its peak, 501 MiB).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g32; mkdir -p $O
timeout 230 python -m leantile bench --suite train --tag lm_head --time-budget 60 --out $O/train > $O/train.log 2>&1; echo "train rc=$?" >> $O/rc.txt
tar czf $OUT/g32.tgz -C $OUT g32; grep "^|\|geomean" $O/train/*.md; tail -n 3 $O/train.log; cat $O/rc.txt
