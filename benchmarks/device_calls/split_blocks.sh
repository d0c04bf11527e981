#!/bin/bash
# Split row reductions' stream block (rules.row_tiles.STREAM_BLOCK; warp_rows leaves split slices at 1024): g35
# had LayerNorm over (c, h, w) 0.1200 -> 0.1080 ms and GroupNorm 0.1178 -> 0.1066 at 256, the MSE loss's slices
# 0.0649 -> 0.0805 and BatchNorm statistics level. More split reductions, at 256 and 512, to find the rule.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g40; mkdir -p $O
timeout 540 python benchmarks/row_tiles/probe.py --out $O --budget 470 \
  --settings stream_block=256,stream_block=512,threads=128+stream_block=256 \
  red:layernorm_chw red:groupnorm red:batchnorm_train fus:mse_loss red:mse_loss red:huber_loss red:hinge_loss \
  fus:instance_norm red:layernorm_chw:n=2 red:groupnorm:n=4 red:layernorm_chw:n=64:h=64:w=64 \
  > $O/probe.log 2>&1; echo "probe rc=$?" >> $O/rc.txt
tar czf $OUT/g40.tgz -C $OUT g40; grep "^|" $O/probe.log; grep -i "Traceback" -A3 $O/probe.log | head; cat $O/rc.txt
