#!/bin/bash
# Issue 49's rows at the copy roofline, 1-2% behind torch.compile in g55 (sigmoid 0.98x, rmsnorm_gain 0.99x,
# mse_loss 8192^2 0.99x, rmsnorm_gain_gemm 0.99x): map kernels' elements and threads a CTA (8192 on 256 threads
# ship: 7.76 waves of 8 CTAs an SM), on-chip rows a CTA and threads, the split loss's stream. Each setting
# verified before it is timed (benchmarks/row_tiles/probe.py).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/${TAG:-g57}; mkdir -p $O
timeout 230 python benchmarks/row_tiles/probe.py --out $O/map --budget 200 \
  --settings map_tile=2048,map_tile=4096,map_tile=16384,map_tile=1024+map_threads=128,map_tile=2048+map_threads=128,map_tile=4096+map_threads=128,map_tile=16384+map_threads=512 \
  fus:sigmoid fus:silu fus:gelu_tanh > $O/map.log 2>&1; echo "map rc=$?" >> $O/rc.txt
timeout 200 python benchmarks/row_tiles/probe.py --out $O/rows --budget 170 \
  --settings 1x128,1x256,2x256,4x256,4x512 fus:rmsnorm_gain red:add_rmsnorm red:rmsnorm_gain_gemm > $O/rows.log 2>&1
echo "rows rc=$?" >> $O/rc.txt
timeout 130 python benchmarks/row_tiles/probe.py --out $O/split --budget 100 \
  --settings stream_block=2048,stream_block=4096,threads=512,threads=128,stages=3 fus:mse_loss red:mse_loss > $O/split.log 2>&1
echo "split rc=$?" >> $O/rc.txt
tar czf $OUT/${TAG:-g57}.tgz -C $OUT ${TAG:-g57}; grep -h "^|" $O/map.log $O/rows.log $O/split.log
grep -h "Error\|wrong" $O/*.log | head -n 8; cat $O/rc.txt
