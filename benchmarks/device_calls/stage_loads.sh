#!/bin/bash
# Streamed row kernels' loads through a pipelined shared tile (plan.passes.stage_loads, tile parameter
# stage_loads=1, off by default until timed): every streamed row of the suites at the shipped plan and staged
# at 2, 3 and 4 stages, torch.compile beside (benchmarks/gemm_tiles/probe.py takes any tile parameters).
# If it wins, make it the default (plan.passes.stage_loads: on unless stage_loads=0) and re-run both suites.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g33; mkdir -p $O
timeout 560 python benchmarks/gemm_tiles/probe.py --out $O/probe --budget 520 \
  --settings stage_loads=1,stage_loads=1+stages=3,stage_loads=1+stages=4 \
  fus:cross_entropy red:log_softmax red:layernorm_chw red:groupnorm red:batchnorm_train red:bias_grad \
  red:rmsnorm_gain_grad fus:mse_loss red:mse_loss red:huber_loss > $O/probe.log 2>&1; echo "probe rc=$?" >> $O/rc.txt
tar czf $OUT/g33.tgz -C $OUT g33; grep "^|" $O/probe.log; grep -i "Traceback" -A3 $O/probe.log | head; cat $O/rc.txt
