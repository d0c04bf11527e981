#!/bin/bash
# After rules.row_tiles.warp_rows (one-pass streamed 16-bit rows at blocks one warp wide) and s105's
# mismatch: (1) s105's failing plan taken apart kernel by kernel (random_vjp f32 at k = 65536, a
# "huge" draw: every online-softmax candidate wrong by 9e9 relative, the unfused plan right, the
# interpreter right on the CPU); (2) the fusion list's cross-entropy at the shipped default now; (3) the
# GPU campaign over the families with streamed rows.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g36; mkdir -p $O
timeout 150 python benchmarks/gpu_fuzz_localize.py benchmarks/results/gpu-fuzz-h200-2026-11-30-s105-backward.json --failure 0 --repeat 2 --out $O/localize-s105.json > $O/localize.log 2>&1; echo "localize rc=$?" >> $O/rc.txt
timeout 100 python benchmarks/fusion/fusion_suite.py --out $O/fusion --only cross_entropy log_softmax mse_loss > $O/fusion.log 2>&1; echo "fusion rc=$?" >> $O/rc.txt
timeout 170 python benchmarks/gpu_fuzz.py --families long_reductions,losses,user_softmax,row_epilogues,long_norms --dtypes f16,bf16 --budget-s 110 --drain-s 40 --seed 106 --tag warp-rows --out $O > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/g36.tgz -C $OUT g36; grep -v "INFO\|WARN" $O/localize.log | tail -n 25; grep "^|" $O/fusion/*.md; tail -n 3 $O/fuzz.log; cat $O/rc.txt
