#!/bin/bash
# lt.op's host time per training step under cProfile, rmsnorm_gain only (g41: 0.899 ms a step with
# launches against 0.121 of GPU time; torch.compile 0.547 / 0.119), after b14e9c1 (gpu_bytes once).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g42; mkdir -p $O
timeout 130 python benchmarks/train_rows/dispatch_profile.py --steps 100 --out $O rmsnorm_gain > $O/log.txt 2>&1; echo "rc=$?" >> $O/log.txt
grep -v "INFO\|WARNING" $O/log.txt | tail -n 45
