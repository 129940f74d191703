#!/usr/bin/env bash
# The eager-call benchmarks and the GPU checks of the argument path and of partitioned calls, on a lent GPU machine
# (jax with its CUDA plugin, Triton, torch there; jax-triton, liger-kernel and fla-core carried as wheels in .whl/).
# Usage: OUT=dir bash bench/gpu_checks.sh STEP...   STEP: eager | args | partitioned | ports | moe-ragged (several GPUs)
#        | mamba-seq-idx | moe-ep-scaling (two GPUs) | row-kernels
set -uo pipefail
python3 -m pip install -q --no-deps --no-build-isolation -e . -e plugins/cuda -e plugins/interpret >/dev/null 2>&1 || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name --format=csv,noheader
for step in "$@"; do
  case $step in
    eager)
      python3 bench/launch_ab.py --rounds 9 --processes 5 --out "$OUT/launch-ab.json" 2>&1 | tail -17
      python3 bench/profile_eager.py --rounds 15 --top 12 --out "$OUT/profile-eager.json" 2>&1 | head -16
      python3 bench/eager_floor.py --rounds 21 --out "$OUT/eager-floor.json" 2>&1 | tail -13 ;;
    args)  # the argument path against Triton's own launcher on torch tensors, vmap methods and repeats on the GPU
      timeout 400 python3 -m pytest -q -rA -p no:cacheprovider tests/test_binding_properties.py \
        tests/test_vmap_method.py tests/test_eager_quick_path.py tests/test_call_repeats.py 2>&1 | grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|passed|failed" \
        | tee "$OUT/args-pytest.txt" | tail -40 ;;
    partitioned)
      python3 bench/partitioned_vs_triton.py --out "$OUT/partitioned-vs-triton.json" 2>&1 | tail -12
      for mode in shardy gspmd explicit; do
        PYTHONPATH=/tmp/site:tests python3 tests/sharding_suite.py $mode > "$OUT/suite-$mode.txt" 2>&1
        PYTHONPATH=/tmp/site:tests python3 tests/keyword_suite.py $mode 25 > "$OUT/keywords-$mode.txt" 2>&1
        python3 - "$OUT" $mode <<'PY'
import json, sys
out, mode = sys.argv[1], sys.argv[2]
for name in ("suite", "keywords"):
    lines = [l for l in open(f"{out}/{name}-{mode}.txt") if l.startswith("REPORT ")]
    if not lines:
        print(f"{name} {mode}: no report"); continue
    report = json.loads(lines[-1][7:])
    cases = {k: v for k, v in report.items() if isinstance(v, dict) and "ok" in v}
    refused = [k for k in cases if k.startswith("refuse/") and not cases[k]["ok"] and cases[k].get("error")]
    bad = [k for k, v in cases.items() if k not in refused
           and not (v["ok"] and v.get("correct", True) and v.get("same_as_one_device", True))]
    print(f"{name} {mode} on {report['devices']} devices: {len(cases) - len(bad) - len(refused)} cases right, "
          f"{len(refused)} refused at the call as they should be (errors in {name}-{mode}.txt); wrong: {bad}")
PY
      done ;;
    ports)  # the ports' partitioned cases on the GPUs: the full output (each failure's entry) in ports-pytest.txt
      SHARDING_TESTS_ON_GPUS=1 timeout 300 python3 -m pytest -q -p no:cacheprovider --tb=line tests/test_partitioned_ports.py \
        > "$OUT/ports-pytest.txt" 2>&1; grep -E "^(E |/.*Error)|passed|failed" "$OUT/ports-pytest.txt" | cut -c1-400 | tail -14 ;;
    moe-ragged)  # XLA's ragged_all_to_all against its CPU stand-in, the ragged expert-parallel MLP against ragged_dot
      PYTHONPATH=/tmp/site:$PWD/.moe-libs:$PWD/tests:$PWD timeout 300 python3 -m pytest -q -p no:cacheprovider \
        --tb=short tests/test_moe_ragged_gpu.py > "$OUT/moe-ragged-pytest.txt" 2>&1; tail -5 "$OUT/moe-ragged-pytest.txt" ;;
    row-kernels)  # Liger's LayerNorm backward and PolyNorm inlined and launched against Liger's launchers on torch
      PYTHONPATH=/tmp/site:$PWD/tests:$PWD timeout 400 python3 -m pytest -q -p no:cacheprovider --tb=short \
        plugins/interpret/tests/test_xla_row_kernels_gpu.py > "$OUT/row-kernels-pytest.txt" 2>&1
      tail -5 "$OUT/row-kernels-pytest.txt" ;;
    mamba-seq-idx)  # the SSD port with packed sequences against mamba-ssm's own function (needs .moe-libs' mamba_ssm)
      PYTHONPATH=/tmp/site:$PWD/.moe-libs:$PWD/tests:$PWD/examples:$PWD timeout 400 python3 -m pytest -q \
        -p no:cacheprovider --tb=short tests/test_mamba_ssd_gpu.py -k "seq_idx or varlen" > "$OUT/mamba-seq-idx-pytest.txt" 2>&1
      tail -5 "$OUT/mamba-seq-idx-pytest.txt" ;;
    moe-ep-scaling)  # tokens/s per GPU of both expert-parallel choices on 2 GPUs against one GPU's (side by side)
      train() { PYTHONPATH=/tmp/site:$PWD/.moe-libs:$PWD timeout 240 python3 examples/moe/train.py --config qwen3-64e \
        --steps 10 --json "$OUT/$1.json" "${@:2}" > "/tmp/moe-logs/$1.log" 2>&1; tail -2 "/tmp/moe-logs/$1.log"; }
      mkdir -p /tmp/moe-logs
      CUDA_VISIBLE_DEVICES=0 train epr1 --ops tritonplug-ep-ragged --batch 8 &
      CUDA_VISIBLE_DEVICES=1 train tp1 --ops tritonplug --batch 8 &
      wait
      CUDA_VISIBLE_DEVICES=0 train ep1 --ops tritonplug-ep --batch 8
      train eprdata2 --ops tritonplug-ep-ragged --mesh data=2 --batch 16
      train epdata2 --ops tritonplug-ep --mesh data=2 --batch 16
      tar czf "$OUT/moe-logs.tgz" -C /tmp/moe-logs . ;;
  esac
done
