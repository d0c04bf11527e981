#!/bin/bash
# Streamed row kernels' stream block (rules.row_tiles.STREAM_BLOCK): at 1024 elements a block of 16-bit
# rows spreads each row over 128 threads, so every block's max and sum cross four warps (a shared-memory
# all-reduce and __syncthreads per row per block: cross-entropy's kernel at 8192 x 32000 f16 streamed
# 1.6 TB/s on 127 registers). At 256 a row is one warp's (a shuffle all-reduce, no barrier, 64 registers).
# Probed on whole plans (staged loads lost everywhere: g33). Then the GPU campaign owed at shipped tiles.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g35; mkdir -p $O
timeout 330 python benchmarks/row_tiles/probe.py --out $O --budget 290 \
  --settings stream_block=256,stream_block=512,threads=128+stream_block=256 \
  fus:cross_entropy red:log_softmax red:layernorm_chw red:groupnorm red:batchnorm_train fus:mse_loss \
  train:cross_entropy:bwd train:log_softmax:bwd \
  > $O/probe.log 2>&1; echo "probe rc=$?" >> $O/rc.txt
# the GPU campaign owed at the shipped tiles since 954487e, f1d81af, b3257c3 (backward plans: the atomic dQ
# offered in training, one stage for narrow rows over a run-time trip count)
timeout 200 python benchmarks/gpu_fuzz.py --families backward,attention_backward,long_reductions,losses --budget-s 140 --drain-s 40 --seed 105 --tag backward --out $O > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/g35.tgz -C $OUT g35; grep "^|" $O/probe.log; grep -i "Traceback" -A3 $O/probe.log | head; tail -n 3 $O/fuzz.log; cat $O/rc.txt
