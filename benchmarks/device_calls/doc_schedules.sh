#!/bin/bash
# Issue 51, document masking's schedule. At 3fbd639 its flash kernel is not warp-specialised (TileLang 0.1.15
# declines a T.Pipelined loop whose trip count reads the per-row bounds' T.alloc_var; ptxas: 364 bytes of
# spills) and runs 0.2532 ms against FlexAttention's 0.1477 (g57). FA3's hand-written schedule (overlap=1)
# takes the ids' load in its softmax part since 66d910c: check it and the plain loop at 2 and 3 stages on the
# GPU (tests/gpu/test_attention_variants_gpu.py), then time each at the suite's shape. If overlap=1 is exact
# and faster, shape_tiles.flash_tiles may let a leaf the mask alone reads keep the overlapped schedule.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/${TAG:-g59}; mkdir -p $O
timeout 240 python -m pytest -q -m gpu tests/gpu/test_attention_variants_gpu.py -k "other_schedules" > $O/gpu_tests.log 2>&1
echo "tests rc=$?" >> $O/rc.txt
S=python/leantile/architectures/variants/document_attention.py:build
for T in "stages=1" "overlap=1" "stages=2" "stages=3"; do
  timeout 75 python -m leantile bench $S --candidate online_exp2+split --tile $T --out $O/bench-${T/=/} > $O/bench-${T/=/}.log 2>&1
  echo "bench $T rc=$?" >> $O/rc.txt
done
tar czf $OUT/${TAG:-g59}.tgz -C $OUT ${TAG:-g59}; tail -n 3 $O/gpu_tests.log; grep -h "^| doc" $O/bench-*/*.md | cut -c1-300; cat $O/rc.txt
