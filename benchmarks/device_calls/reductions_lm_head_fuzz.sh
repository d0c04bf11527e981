#!/bin/bash
# After 256-row tiles for narrow row-epilogue GEMMs (shape_tiles.ROW_EPILOGUE_TILES), epilogue values left to a
# reader that recomputes their one-hot or mask (rules.gemm.left_to_reader) and chunks of 128 MiB: the reductions
# suite (issue 49), the LM head's train row (issue 50's memory bound), the GPU campaign over the families touched.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g26; mkdir -p $O
timeout 290 python benchmarks/fusion/fusion_suite.py --cases reductions --out $O/red > $O/red.log 2>&1; echo "red rc=$?" >> $O/rc.txt
timeout 130 python -m leantile bench --suite train --tag lm_head --time-budget 60 --out $O/train > $O/train.log 2>&1; echo "train rc=$?" >> $O/rc.txt
timeout 130 python benchmarks/gpu_fuzz.py --families normed_gemm,user_gemm,losses,backward --budget-s 70 --drain-s 25 --seed 94 --tag row-epilogue-tiles --out $O > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/g26.tgz -C $OUT g26; grep -v "INFO\|WARNING" $O/red.log | grep "^|\|geomean"; grep "^|\|geomean" $O/train/*.md; tail -n 3 $O/fuzz.log; cat $O/rc.txt
