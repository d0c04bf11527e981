#!/bin/bash
# Attention backward with dQ added from the dK/dV kernel as FA3 does (one TMA reduce-add of a staged block, and
# now offered with the forward's statistics saved: the training path): its time against the default (a dQ
# kernel of its own), the GPU tests of both staged paths, and the train suite's attention rows against cuDNN.
# If the atomic form wins, lower cost.ATOMIC_TRAFFIC for TMA reduce-adds (it ranks second by design today).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g34; mkdir -p $O
timeout 240 python benchmarks/flash_backward/variants.py --out $O/variants --variants default atomic_dq atomic_dq_m64_t128 > $O/variants.log 2>&1; echo "variants rc=$?" >> $O/rc.txt
timeout 150 python -m pytest -m gpu -q tests/gpu/test_storage_and_staging_gpu.py > $O/gpu-tests.txt 2>&1; echo "gpu tests rc=$?" >> $O/rc.txt
timeout 180 python -m leantile bench --suite train --tag attention --time-budget 120 --out $O/train > $O/train.log 2>&1; echo "train rc=$?" >> $O/rc.txt
tar czf $OUT/g34.tgz -C $OUT g34; grep "ms" $O/variants.log | head -20; tail -n 3 $O/gpu-tests.txt; grep "^|" $O/train/*.md; cat $O/rc.txt
