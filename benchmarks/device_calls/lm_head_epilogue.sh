#!/bin/bash
# The LM head after the one-hot joined the backward GEMM's epilogue (rules.gemm.tile_computable): its train row at
# the shipped chunks and at chunks of half the intermediates (chunked.CHUNK_TARGET 128 MiB: issue 50's memory bound
# is a quarter of torch.compile's peak, 630 / 2004 MiB before), the GPU campaign over the families the epilogue
# change touches, and the GEMM-epilogue tiles probe (a GroupNorm's 128-column tile at block_m 256).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g25; mkdir -p $O
timeout 140 python -m leantile bench --suite train --tag lm_head --time-budget 60 --out $O/train > $O/train.log 2>&1; echo "train rc=$?" >> $O/rc.txt
timeout 140 python -c "import sys, leantile.chunked as c; c.CHUNK_TARGET = 1 << 27; from leantile.entry import main; sys.exit(main(['bench', '--suite', 'train', '--tag', 'lm_head', '--time-budget', '60', '--out', '$O/train128']))" > $O/train128.log 2>&1; echo "train128 rc=$?" >> $O/rc.txt
timeout 170 python benchmarks/gpu_fuzz.py --families backward,user_gemm,random,losses --budget-s 100 --drain-s 30 --seed 93 --tag input-epilogues --out $O > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
timeout 100 python benchmarks/gemm_tiles/probe.py --out $O/probe --budget 80 \
  --settings block_m=256,block_m=256+stages=3,stages=3 red:gemm_groupnorm_large red:gemm_groupnorm \
  > $O/probe.log 2>&1; echo "probe rc=$?" >> $O/rc.txt
tar czf $OUT/g25.tgz -C $OUT g25; grep "^|\|geomean" $O/train/*.md $O/train128/*.md; tail -n 3 $O/fuzz.log; grep "^|" $O/probe.log; cat $O/rc.txt
