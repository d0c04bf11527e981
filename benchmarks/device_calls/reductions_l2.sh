#!/bin/bash
# After 954487e: the fusion list's rmsnorm_gain_gemm with the operand gain priced out of the default, the
# L2 reuse probe (a normalise pass launched in reverse along one grid axis, so the input its statistics pass
# read last, still in L2, is read first), then the whole reductions suite at HEAD (issue 49's geomean).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g31; mkdir -p $O
timeout 80 python benchmarks/fusion/fusion_suite.py --cases fusion --only rmsnorm_gain_gemm --out $O/fusion > $O/fusion.log 2>&1; echo "fusion rc=$?" >> $O/rc.txt
timeout 130 python benchmarks/l2_reuse/reverse_probe.py --out $O/l2 --budget 110 red:layernorm_chw red:groupnorm red:batchnorm_train > $O/l2.log 2>&1; echo "l2 rc=$?" >> $O/rc.txt
timeout 330 python benchmarks/fusion/fusion_suite.py --cases reductions --out $O/reductions > $O/reductions.log 2>&1; echo "reductions rc=$?" >> $O/rc.txt
tar czf $OUT/g31.tgz -C $OUT g31; grep "^|" $O/fusion.log | tail -1; grep "^|" $O/l2.log; grep "^|\|geomean" $O/reductions.log; cat $O/rc.txt
