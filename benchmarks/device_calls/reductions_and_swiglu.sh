#!/bin/bash
# Next session: the reductions suite (issue 49) and the swiglu/rmsnorm_mlp steps per kernel (sibling maps, earlier products).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g16; mkdir -p $O
timeout 400 python benchmarks/fusion/fusion_suite.py --cases reductions --out $O/red > $O/red.log 2>&1; echo "red rc=$?" >> $O/rc.txt
timeout 150 python benchmarks/train_rows/step_kernels.py --out $O/steps swiglu rmsnorm_mlp > $O/steps.log 2>&1; echo "steps rc=$?" >> $O/rc.txt
tar czf $OUT/g16.tgz -C $OUT g16; grep -v "INFO\|WARNING" $O/red.log | tail -n 24; grep -v "INFO\|WARNING\|warn" $O/steps.log | tail -n 30; cat $O/rc.txt
