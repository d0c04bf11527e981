#!/bin/bash
# GPU campaign s105's open mismatch (backward/random_vjp f32, i=255 k=65536, a "huge" draw, scale 2^14):
# localize (g36) found the two-pass row kernel row_10 wrong by itself (isolated, given the
# interpreter's inputs: mul_12 rel err 9.3e9 against a value that cancels to ~1e-5; every other
# kernel right; normal and large draws right; the interpreter right on the CPU). Now its worst elements
# (index, got, want), and the failures replayed at HEAD. Expected (2026-11-30, fourteenth, not confirmed): d_X cancels
# exactly in the graph's op-by-op rounding (a one-hot softmax at 2^14), the fused kernel's FMA d*e^s - r leaves a
# unit of 1e5-sized terms; the judge's rounding probe (reference.evaluate jitter) now calls that draw
# ill-conditioned, so the replay should show them unjudged or ok, never wrong.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g37; mkdir -p $O
timeout 200 python benchmarks/gpu_fuzz_localize.py benchmarks/results/gpu-fuzz-h200-2026-11-30-s105-backward.json --failure 0 --repeat 1 --out $O/localize-s105.json > $O/localize.log 2>&1; echo "localize rc=$?" >> $O/rc.txt
timeout 200 python benchmarks/gpu_fuzz_replay.py benchmarks/results/gpu-fuzz-h200-2026-11-30-s105-backward.json --out $O > $O/replay.log 2>&1; echo "replay rc=$?" >> $O/rc.txt
tar czf $OUT/g37.tgz -C $OUT g37; grep -v "INFO\|WARN" $O/localize.log | tail -n 20; tail -n 5 $O/replay.log; cat $O/rc.txt
