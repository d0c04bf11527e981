#!/bin/bash
# Next session, first: what 2026-11-30's eleventh session changed in derive and plan without a GPU left to check
# it (TWO_PASS_BYTES 128 KB, rules.gemm.left_to_reader, the GQA contenders' capture fix): the GPU campaign over the
# families those touch, the GPU tests, and the train suite's rows (log_softmax, rmsnorm, gqa_attention).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g23; mkdir -p $O
timeout 200 python benchmarks/gpu_fuzz.py --families row_epilogues,long_norms,normed_gemm,user_gemm,backward,random --budget-s 110 --drain-s 40 --seed 91 --tag after-860974b --out $O > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
timeout 120 python -m pytest -m gpu -q tests/gpu/test_gpu_kernels.py tests/gpu/test_autodiff_gpu.py > $O/gpu-tests.txt 2>&1; echo "gpu tests rc=$?" >> $O/rc.txt
timeout 240 python -m leantile bench --suite train --tag log_softmax rmsnorm gqa_attention --time-budget 150 --out $O/train > $O/train.log 2>&1; echo "train rc=$?" >> $O/rc.txt
tar czf $OUT/g23.tgz -C $OUT g23; tail -n 4 $O/fuzz.log; tail -n 3 $O/gpu-tests.txt; grep "^|\|geomean" $O/train/*.md; cat $O/rc.txt
