#!/bin/bash
# The LM head trained through its fused step (leantile.train_step + torch.StepOp, 2026-11-30 fourteenth):
# 16 chunks of 512 tokens, three GEMM passes, dW added in place by each chunk's dW GEMM epilogue.
# Time and peak memory against torch.compile (issue 50: no case below 0.8x, peak <= 1/4 of torch.compile's),
# then the s105 mismatch's worst elements (s105_row10.sh's first half).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g38; mkdir -p $O
timeout 300 python -m leantile bench --suite train --tag lm_head --time-budget 250 --out $O/train > $O/train.log 2>&1; echo "train rc=$?" >> $O/rc.txt
timeout 120 python -m pytest -m gpu -q tests/gpu/test_chunked_gpu.py -k "fused_loss or lt_op_trains" > $O/gpu-tests.txt 2>&1; echo "gpu tests rc=$?" >> $O/rc.txt
timeout 150 python benchmarks/gpu_fuzz_localize.py benchmarks/results/gpu-fuzz-h200-2026-11-30-s105-backward.json --failure 0 --repeat 1 --out $O/localize-s105.json > $O/localize.log 2>&1; echo "localize rc=$?" >> $O/rc.txt
tar czf $OUT/g38.tgz -C $OUT g38; grep "^|" $O/train/*.md; grep -i "traceback" -A5 $O/train.log | head; grep -v "INFO\|WARN" $O/localize.log | tail -n 4; cat $O/rc.txt
