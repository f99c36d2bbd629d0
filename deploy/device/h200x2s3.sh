#!/usr/bin/env bash
# h200-x2: the default suite twice on one fresh machine (cold, then with the compile cache warm)
# REFERENCE (optional): an earlier run's evidence folder, whose probe walls are listed beside these runs'
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L
for n in 1 2; do
  start=$(date +%s)
  timeout 280 python3 -m pytest -p no:cacheprovider --cluster-profile h200-x2 tests_cluster/ --cluster-evidence $OUT/h200-x2-run$n > $OUT/suite$n.txt 2>&1
  echo "rc=$? wall=$(( $(date +%s) - start ))" >> $OUT/suite$n.txt
  tail -2 $OUT/suite$n.txt
  python3 deploy/device/show.py $OUT/h200-x2-run$n
done
python3 -m acceptance.cli.walls ${REFERENCE:+"$REFERENCE"} $OUT/h200-x2-run1 $OUT/h200-x2-run2 > $OUT/walls.txt; cat $OUT/walls.txt
python3 -m acceptance.cli.walls $OUT/h200-x2-run2 --phases > $OUT/phases.txt
grep "^training" $OUT/phases.txt | head -12
cd $OUT && tar czf ev.tgz h200-x2-run1 h200-x2-run2 && rm -rf h200-x2-run1 h200-x2-run2 && ls -la
