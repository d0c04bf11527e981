#!/bin/bash
# lt.op's host time per training step, under cProfile (issue 50: dispatch is most of rmsnorm_gain's step with launches).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/dispatch; mkdir -p $O
timeout 300 python benchmarks/train_rows/dispatch_profile.py --out $O rmsnorm_gain layernorm_affine > $O/log.txt 2>&1; echo "rc=$?" >> $O/log.txt
grep -v "INFO\|WARNING" $O/log.txt | tail -n 80
