#!/bin/bash
# Issue 51: the per-row bounds as let-bound expressions (TileLang 0.1.15 then warp-specialises the flash loop:
# CPU lowering, 0 spills where g57's kernel had no producer and 364 bytes of spills). GPU tests of document
# masking (every candidate at 2049 tokens, the other schedules), the probe at the suite's shape (shipped plan
# against FlexAttention), overlap=1 timed beside it, then a campaign over masked / user attention (seed 118).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/${TAG:-g59}; mkdir -p $O
timeout 210 python -m pytest -q -m gpu tests/gpu/test_attention_variants_gpu.py \
  -k "(every_candidate and document) or (other_schedules and 2049)" > $O/gpu_tests.log 2>&1; echo "tests rc=$?" >> $O/rc.txt
timeout 75 python benchmarks/attention_variants/probe.py --out $O/probe document_attention_t4096 > $O/probe.log 2>&1; echo "probe rc=$?" >> $O/rc.txt
S=python/leantile/architectures/variants/document_attention.py:build
timeout 70 python -m leantile bench $S --candidate online_exp2+split --tile overlap=1 --out $O/bench-overlap1 > $O/bench-overlap1.log 2>&1
echo "bench overlap=1 rc=$?" >> $O/rc.txt
timeout 150 python benchmarks/gpu_fuzz.py --families masked_attention,user_attention --dtypes f16,bf16,f32 --budget-s 100 \
  --drain-s 30 --seed 118 --tag doc-ws --out $O/fuzz > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/${TAG:-g59}.tgz -C $OUT ${TAG:-g59}; tail -n 3 $O/gpu_tests.log; grep -v "INFO\|WARN" $O/probe.log | grep "shipped\|flex"
grep -h "^| doc" $O/bench-*/*.md | cut -c1-300; grep -v "INFO\|WARN" $O/fuzz.log | grep "plans:"; cat $O/rc.txt
