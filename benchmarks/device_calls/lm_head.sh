#!/bin/bash
# Next session: the chunked LM head + cross-entropy (issue 50's memory bound) -- its GPU tests, then the
# train suite's lm_head_ce case (8192 x 4096 x 128256: time and peak memory against torch.compile).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g22; mkdir -p $O
timeout 200 python -m pytest -m gpu -q tests/gpu/test_chunked_gpu.py > $O/gpu-tests.txt 2>&1; echo "gpu tests rc=$?" >> $O/rc.txt
timeout 330 python -m leantile bench --suite train --tag lm_head --time-budget 60 --out $O/train > $O/train.log 2>&1; echo "train rc=$?" >> $O/rc.txt
tar czf $OUT/g22.tgz -C $OUT g22; tail -n 5 $O/gpu-tests.txt; grep "^|\|geomean" $O/train/*.md; cat $O/rc.txt
