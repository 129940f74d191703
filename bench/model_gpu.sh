#!/usr/bin/env bash
# The model benchmarks on a lent GPU machine (jax with its CUDA plugin, Triton, torch there; the pinned kernel
# libraries carried as wheels in .whl/). Usage: bash bench/model_gpu.sh OUT_DIR STEP...   STEP: compare | bench | maxbatch | mesh | vocab
set -uo pipefail
out=$1; shift
python3 -m pip install -q --no-deps --no-build-isolation -e . -e plugins/cuda >/dev/null 2>&1 || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for step in "$@"; do
  case $step in
    compare) python3 examples/llama/train.py --config small --ops compare --steps 50 --json "$out/model-compare-small.json" 2>&1 | tail -60 ;;
    bench) python3 bench/model.py --config 1b --batch "${BATCH:-8}" --steps 6 --ops "jax;tritonplug;jax,loss=tritonplug" --breakdown --out "$out/model-1b.json" ;;
    maxbatch) python3 bench/model.py --config 1b --batch "${BATCH:-8}" --steps 3 --ops "jax;tritonplug" --max-batch --out "$out/model-1b-maxbatch.json" ;;
    mesh) python3 bench/model.py --config 1b --batch "${BATCH:-4}" --steps 6 --ops "${OPS:-jax;jax,loss=tritonplug;tritonplug}" --mesh "${MESH:-data=2,model=2}" --out "$out/model-1b-mesh.json" ;;
    vocab) python3 bench/model.py --config 1b --batch "${BATCH:-4}" --steps 6 --ops "jax;tritonplug,loss=liger;tritonplug;jax,loss=liger;jax,loss=tritonplug" --mesh "${MESH:-data=2,model=2}" --out "$out/model-1b-vocab-parallel.json" ;;
  esac
done
