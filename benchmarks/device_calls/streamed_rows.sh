#!/bin/bash
# Next session: streamed row kernels' threads, two-pass rows and stream block (the on-chip rows' probe of
# 2026-11-30 found 2 rows on 128 threads 10-45% faster; streamed rows and column sums still run 256 threads).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g21; mkdir -p $O
timeout 540 python benchmarks/row_tiles/probe.py --out $O --budget 470 \
  --settings threads=128,two_pass=131072,threads=128+two_pass=131072,stream_block=2048 \
  train:log_softmax:fwd train:log_softmax:bwd train:cross_entropy:fwd train:cross_entropy:bwd \
  red:log_softmax red:layernorm_chw red:mse_loss red:bias_grad train:rmsnorm_gain:bwd \
  > $O/probe.log 2>&1; echo "probe rc=$?" >> $O/rc.txt
tar czf $OUT/g21.tgz -C $OUT g21; grep "^|" $O/probe.log; grep -i "Traceback" -A3 $O/probe.log | head; cat $O/rc.txt
