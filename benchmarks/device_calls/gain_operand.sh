#!/bin/bash
# RMSNorm with a gain before a GEMM in one kernel (gain_fold into the operand, a candidate after the measured
# ones): its GPU time against the shipped prenorm plan and torch.compile (the reductions and fusion suites'
# rmsnorm_gain_gemm, 0.98x), and the GPU campaign over the family that draws gained norms before GEMMs.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g28; mkdir -p $O
timeout 200 python benchmarks/gemm_tiles/probe.py --out $O/probe --budget 170 \
  --settings cand=stats_fused+gain_operand,block_n=128+cand=stats_fused+gain_operand,cand=stats_fused \
  red:rmsnorm_gain_gemm > $O/probe.log 2>&1; echo "probe rc=$?" >> $O/rc.txt
timeout 200 python benchmarks/gpu_fuzz.py --families user_norm_gemm,normed_gemm --budget-s 110 --drain-s 40 --seed 95 --tag gain-operand --out $O > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/g28.tgz -C $OUT g28; grep "^|" $O/probe.log; tail -n 3 $O/fuzz.log; cat $O/rc.txt
