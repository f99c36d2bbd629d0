#!/usr/bin/env bash
# $1 profile: on one fresh machine, the suite without the storage family (the families it had when the
# wall-time targets were set) with torch.compile's cache cold, then the default suite and the suite
# without storage again, warm; each run's probe walls and rank 0's phases
p=$1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L; nproc
for n in 1 2 3; do
  sel=(-m "not storage"); [ $n = 2 ] && sel=()
  start=$(date +%s.%N)
  timeout 280 python3 -m pytest -p no:cacheprovider --cluster-profile $p tests_cluster/ "${sel[@]}" --cluster-evidence $OUT/$p-run$n > $OUT/suite$n.txt 2>&1
  echo "rc=$? wall=$(python3 -c "import time; print(round(time.time() - $start, 1))") selection=${sel[*]:-all}" >> $OUT/suite$n.txt
  tail -2 $OUT/suite$n.txt
  python3 -m acceptance.cli.walls $OUT/$p-run$n > $OUT/walls$n.txt
  python3 -m acceptance.cli.walls $OUT/$p-run$n --phases > $OUT/phases$n.txt
  cat $OUT/walls$n.txt
done
cd $OUT && tar czf ev.tgz $p-run1 $p-run2 $p-run3 && rm -rf $p-run1 $p-run2 $p-run3 && ls -la
