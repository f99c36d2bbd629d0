#!/usr/bin/env bash
# h100-x1: the default suite N times on one machine (runs $1..$2), for the run-to-run spread of every figure
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L; nvidia-smi --query-gpu=uuid,serial --format=csv,noheader
for n in $(seq $1 $2); do
  start=$(date +%s)
  timeout 280 python3 -m pytest -p no:cacheprovider --cluster-profile h100-x1 tests_cluster/ --cluster-evidence $OUT/h100-x1-run$n > $OUT/suite$n.txt 2>&1
  echo "rc=$? wall=$(( $(date +%s) - start ))" >> $OUT/suite$n.txt
  tail -2 $OUT/suite$n.txt
  python3 benchmarks/show.py $OUT/h100-x1-run$n
  python3 -m acceptance.cli.walls $OUT/h100-x1-run$n > $OUT/walls$n.txt
done
cd $OUT && tar czf ev$1.tgz h100-x1-run* && rm -rf h100-x1-run* && ls -la
