#!/bin/bash
# Shared bytes (plan.storage: an intermediate inside an output not yet written) and the pullouts that
# stop where the GEMM's operand changes dtype: the GPU campaign s99 over the families whose plans keep
# intermediates (split reductions, norms over several axes, losses, decode, backward, unfused
# candidates) and user_norm_gemm (s95's 17 crashes, mixed dtypes), then the reductions suite's rows
# whose peak memory passed torch.compile's by the split partials (layernorm_chw, groupnorm, batchnorm_train).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g29; mkdir -p $O
timeout 330 python benchmarks/gpu_fuzz.py --families user_norm_gemm,long_reductions,long_norms,axis_norms,losses,column_reductions,nested_reductions,decode_attention,backward,random,normed_gemm --budget-s 230 --drain-s 60 --seed 99 --tag storage --out $O > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
timeout 220 python benchmarks/fusion/fusion_suite.py --cases reductions --only layernorm_chw groupnorm batchnorm_train mse_loss bias_grad gemm_groupnorm_large --out $O/suite > $O/suite.log 2>&1; echo "suite rc=$?" >> $O/rc.txt
tar czf $OUT/g29.tgz -C $OUT g29; grep "^|" $O/suite.log | head -12; tail -n 3 $O/fuzz.log; cat $O/rc.txt
