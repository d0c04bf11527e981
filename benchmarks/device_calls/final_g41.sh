#!/bin/bash
# The session's last call (2026-11-30, fifteenth): s105's four failures replayed with the judge that
# forgives another rounding order (527e383); the LM head's step with a 4096-element stream block in its
# row kernel (g40: 6.1 ms of 47.6, latency-bound at 512 CTAs); then the whole train suite at HEAD.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g41; mkdir -p $O
timeout 90 python benchmarks/gpu_fuzz_replay.py benchmarks/results/gpu-fuzz-h200-2026-11-30-s105-backward.json --out $O/replay-s105.json > $O/replay.log 2>&1; echo "replay rc=$?" >> $O/rc.txt
timeout 75 python benchmarks/train_rows/step_kernels.py --out $O --leantile-only --stream-block 4096 --tag sb4096 lm_head_ce > $O/kernels-sb4096.log 2>&1; echo "sb4096 rc=$?" >> $O/rc.txt
timeout 330 python -m leantile bench --suite train --time-budget 270 --out $O/train > $O/train.log 2>&1; echo "train rc=$?" >> $O/rc.txt
tar czf $OUT/g41.tgz -C $OUT g41; grep -v "INFO\|WARN" $O/replay.log | tail -n 6; grep -v "INFO\|WARN\|arn" $O/kernels-sb4096.log | head -8; grep -v "INFO\|WARNING" $O/train.log | tail -n 18; cat $O/rc.txt
