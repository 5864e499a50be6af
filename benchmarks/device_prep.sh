#!/usr/bin/env bash
# Prepares a run of the accelerator suite (benchmarks/devices.py --suite accelerator) on a GPU machine
# that has JAX, scikit-learn and pandas but not the rest: the wheels it lacks go to .whl/, the data
# files the suite reads to .device-data/ (both ignored by git; the device tool carries them).
# Run it from the repository root, then start the device run with the command it prints.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl .device-data
mkdir -p .whl .device-data
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "arviz==0.23.4" "numpyro==0.22.0" "xarray-einstats==0.11.0" "h5netcdf==1.8.2" \
  "platformdirs==4.14.8" "bartz==0.13.0"
cp "${BAYESTREES_DATA:-../shared/data}/breast_cancer_wisconsin.data" .device-data/
du -sh .whl .device-data
cat <<'MSG'

Device run (carry: [".whl", ".device-data"], timeout_s 540); California housing comes from the package:

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target .site .whl/*.whl && export PYTHONPATH=$PWD/.site:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false && nvidia-smi -L; python3 benchmarks/devices.py --suite accelerator --data-dir .device-data --bartz-python python3 --out $OUT/devices_accelerator.jsonl 2>&1 | tee $OUT/log
MSG
