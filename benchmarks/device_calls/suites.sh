#!/bin/bash
# Both fusion suites whole in one call at HEAD (issue 49: the 32-row geomean, every row's peak memory):
# the 2026-11-30 figure 1.213 was assembled from three calls (954487e, 68a58e4, and 0087e82's warp block).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/${TAG:-g55}; mkdir -p $O
timeout 270 python benchmarks/fusion/fusion_suite.py --cases reductions --out $O/reductions > $O/reductions.log 2>&1; echo "reductions rc=$?" >> $O/rc.txt
timeout 270 python benchmarks/fusion/fusion_suite.py --cases fusion --out $O/fusion > $O/fusion.log 2>&1; echo "fusion rc=$?" >> $O/rc.txt
tar czf $OUT/${TAG:-g55}.tgz -C $OUT ${TAG:-g55}; grep -h "^|\|geomean" $O/reductions/*.md $O/fusion/*.md; cat $O/rc.txt
