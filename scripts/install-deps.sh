#!/usr/bin/env bash
# Installs lattn's build and test dependencies from Debian 12 packages.
# Idempotent: prints nothing and touches nothing when everything is present.
# The CUDA toolkit is optional and never installed here (nvcc is used where found).
set -euo pipefail

packages=(
  build-essential cmake            # compiler, CMake >= 3.25
  libgtest-dev libgmock-dev        # GoogleTest / GoogleMock
  libbenchmark-dev                 # Google Benchmark
  libopenblas-dev                  # CPU GEMMs (cblas)
  libcli11-dev nlohmann-json3-dev  # the lattn command
  libdlpack-dev                    # zero-copy tensor exchange
  pybind11-dev python3-dev         # Python bindings (Debian's interpreter)
  python3-numpy python3-pytest     # Python tests
  python3-torch                    # PyTorch 1.13 (CPU): torch custom-op and DLPack tests (docs/python.md)
  python3-pip python3-setuptools python3-wheel python3-venv  # `pip install .` offline (docs/python.md)
  python3-matplotlib               # lattn bench --plot
  clang-format-14                  # scripts/check-format.sh (CI)
  clang libclang-rt-14-dev libomp-dev  # libFuzzer targets (scripts/fuzz.sh, make test)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
