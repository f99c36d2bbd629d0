#!/usr/bin/env bash
# h200-x2: zero3_tuned alone in fresh jobs (in the suite it runs after zero3, in the same job)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
for i in 1 2; do
  timeout 90 python3 -m acceptance.cli.bench_train --profile h200-x2 --strategies zero3_tuned --evidence $OUT/alone-$i > $OUT/alone-$i.txt 2>&1
  echo "alone $i rc=$?"; grep -E "^zero3|FAILED" $OUT/alone-$i.txt
done
cd $OUT && tar czf alone.tgz alone-1 alone-2 && rm -rf alone-1 alone-2 && ls
