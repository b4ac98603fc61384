#!/usr/bin/env bash
# The device check: gputui against one real NVIDIA GPU (prepared for a lent machine, e.g. one H200).
#
# It only reads the GPUs (no reset, no `nvidia-smi -pm`, no MIG change, no clock or power setting); the one
# process it signals is the child it started itself to hold GPU memory. It prints its figures and writes
# them to $OUT/device-report.json; the whole run is bounded to about 8 minutes.
#
# Offline install: the lent machine cannot reach a package index, so gputui and its dependencies travel as
# wheels in tests/device/wheels (ignored by git: *.whl). Build them, on a machine with the same CPU
# architecture and Python minor version as the lent one, from the repository root:
#
#   pip wheel --no-deps -w tests/device/wheels .
#   pip download -d tests/device/wheels --only-binary=:all: \
#       'textual>=1.0' 'nvidia-ml-py>=12.535' 'paramiko>=3.4' 'psutil>=5.9' 'prometheus-client>=0.20' \
#       'shtab>=1.7'
#   # (add --python-version 3.X --platform manylinux2014_x86_64 when building on another Python)
#
# and carry the folder with the tree (the device tool's `carry: ["tests/device/wheels"]`). Without wheels,
# the source tree itself is used where the machine's python3 already has the dependencies.
#
# It also runs the readiness probe (check --probe) and records each step's time.
#
# Usage, from the repository root:   OUT=/some/dir tests/device/run_device_check.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
WHEELS=tests/device/wheels
PY=${PYTHON:-python3}
started=$(date +%s)

echo "== device: $(uname -srm), $($PY --version 2>&1)"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.used,memory.total,persistence_mode,ecc.mode.current \
    --format=csv 2>&1 | head -20
# The driver's own words on fitness, read only: its recovery action and the NVLink fabric registration.
nvidia-smi --query-gpu=index,gpu_recovery_action --format=csv 2>&1 | head -20
nvidia-smi -q 2>&1 | grep -A 6 -E '^\s+Fabric' | head -40

VENV=$(mktemp -d)/venv
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    if timeout 120 "$PY" -m venv "$VENV" && timeout 180 "$VENV/bin/pip" install -q --no-index \
        --find-links "$WHEELS" gputui; then
        RUN="$VENV/bin/python"
        echo "== gputui installed offline from $WHEELS into $VENV"
    else
        echo "== offline install failed; trying the source tree"
        RUN=$PY
        export PYTHONPATH=$PWD
    fi
else
    echo "== no wheels in $WHEELS; using the source tree with $PY"
    RUN=$PY
    export PYTHONPATH=$PWD
fi
"$RUN" -c 'import gputui, pynvml; print("== gputui", gputui.__version__, "from", gputui.__file__)' || {
    echo "== gputui cannot be imported here: stopping"
    exit 2
}

# The run's own state: no calibration, audit log or cache of the machine is read or written.
export XDG_STATE_HOME="$OUT/state" XDG_CACHE_HOME="$OUT/cache" XDG_CONFIG_HOME="$OUT/config"
unset GPUTUI_TEST_KERNEL_LOG
spent=$(( $(date +%s) - started ))
budget=$(( 440 - spent ))
timeout --kill-after=10 $(( budget + 20 )) "$RUN" tests/device/device_check.py --out "$OUT" --budget "$budget"
rc=$?
echo "== device check exit $rc after $(( $(date +%s) - started )) s; report in $OUT/device-report.json"
exit $rc
