#!/usr/bin/env bash
# The eager-call benchmarks and the GPU checks of the argument path on a lent GPU machine (jax with its CUDA
# plugin, Triton, torch there; jax-triton carried as a wheel in .whl/). Usage: OUT=dir bash bench/eager_gpu.sh
set -uo pipefail
python3 -m pip install -q --no-deps --no-build-isolation -e . -e plugins/cuda >/dev/null 2>&1 || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/jax_triton*.whl >/dev/null || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name --format=csv,noheader
python3 bench/launch_ab.py --rounds 21 --out $OUT/launch-ab.json 2>&1 | tail -16
python3 bench/profile_eager.py --rounds 15 --top 12 --out $OUT/profile-eager.json 2>&1 | head -14
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_binding_properties.py tests/test_vmap_method.py tests/test_eager_quick_path.py 2>&1 | tail -6
