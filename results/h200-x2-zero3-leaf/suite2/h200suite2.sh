#!/usr/bin/env bash
# h200-x2: the default suite once on a fresh machine, then where each probe's time went
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L
start=$(date +%s)
timeout 330 python3 -m pytest -p no:cacheprovider --cluster-profile h200-x2 tests_cluster/ --cluster-evidence $OUT/h200-x2-leaf > $OUT/suite.txt 2>&1
echo "rc=$? wall=$(( $(date +%s) - start ))" >> $OUT/suite.txt
grep -E "^\[cluster\]|passed|failed|verdict|FAIL|^rc=|^(strategy|ddp|fsdp|zero|scaling)" $OUT/suite.txt | tail -30
python3 -m acceptance.cli.walls results/h200-x2-zero3-leaf/h200-x2-leaf $OUT/h200-x2-leaf
python3 -m acceptance.cli.walls $OUT/h200-x2-leaf --phases > $OUT/phases.txt; grep -v -E "^collectives|^connectivity|^compute|^health" $OUT/phases.txt | tail -45
cd $OUT && tar czf ev.tgz h200-x2-leaf && rm -rf h200-x2-leaf && ls -la
