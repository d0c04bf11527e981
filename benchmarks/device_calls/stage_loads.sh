#!/bin/bash
# Streamed row kernels' loads through a pipelined shared tile (plan.passes.stage_loads, tile parameter
# stage_loads=1, off by default until timed): the suites' streamed rows at the shipped plan and staged at 2, 3
# and 4 stages (each setting verified, then timed; torch.compile beside: benchmarks/gemm_tiles/probe.py), then
# the GPU campaign s103 with every plan staged (--tiles stage_loads=1) over the families that stream rows.
# If it wins, make it the default (plan.passes.stage_loads: on unless stage_loads=0) and re-run both suites.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g33; mkdir -p $O
timeout 310 python benchmarks/gemm_tiles/probe.py --out $O/probe --budget 280 \
  --settings stage_loads=1,stage_loads=1+stages=3,stage_loads=1+stages=4 \
  fus:cross_entropy red:log_softmax red:layernorm_chw red:groupnorm red:batchnorm_train red:bias_grad \
  red:rmsnorm_gain_grad fus:mse_loss red:mse_loss > $O/probe.log 2>&1; echo "probe rc=$?" >> $O/rc.txt
timeout 250 python benchmarks/gpu_fuzz.py --tiles stage_loads=1 --families long_reductions,long_norms,axis_norms,losses,column_reductions,nested_reductions,row_epilogues,user_softmax --budget-s 170 --drain-s 50 --seed 103 --tag stage-loads --out $O > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/g33.tgz -C $OUT g33; grep "^|" $O/probe.log; tail -n 3 $O/fuzz.log; cat $O/rc.txt
