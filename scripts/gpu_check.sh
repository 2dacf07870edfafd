#!/usr/bin/env bash
# Record a small GPU trace with a visible host-to-device share, analyse it with tftune
# (and XProf, for comparison), and copy the trace and the outputs to OUTDIR.
#
#   scripts/gpu_check.sh OUTDIR
#
# The example feeds a 32 MiB host tensor per step to a small matmul on the GPU, so each
# step copies it host-to-device (MemcpyH2D) and the copy is a large part of the step.
# Without a visible NVIDIA GPU it says so, records the same example on the CPU, and still
# runs every later step, so the path is exercised; its outputs then say "CPU_ONLY".
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
OUT="$(mkdir -p "$1" && cd "$1" && pwd)"
PY="${PYTHON:-python}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export TF_CPP_MIN_LOG_LEVEL=2

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  nvidia-smi -L | tee "$OUT/nvidia-smi.txt"
  MODE=gpu
else
  echo "gpu_check: no NVIDIA GPU visible (nvidia-smi missing or failing): recording on the" \
       "CPU to exercise the path; the trace will have no /device:GPU plane." | tee "$OUT/NO_GPU"
  MODE=cpu
fi

cat > "$WORK/record.py" <<'PYEOF'
import os, sys
import numpy as np
import tensorflow as tf

logdir, steps = sys.argv[1], int(sys.argv[2])
gpus = tf.config.list_physical_devices("GPU")
print("tensorflow", tf.__version__, "GPUs:", [g.name for g in gpus])
if os.environ.get("GPU_CHECK_MODE") == "gpu" and not gpus:
    sys.exit("gpu_check: nvidia-smi sees a GPU but TensorFlow does not (CUDA build/drivers?)")
host = np.random.default_rng(0).standard_normal((2048, 4096), dtype=np.float32)  # 32 MiB
with tf.device("/CPU:0"):
    ds = tf.data.Dataset.from_tensors(host).repeat().prefetch(2)
device = "/GPU:0" if gpus else "/CPU:0"
with tf.device(device):
    w = tf.Variable(tf.random.normal([4096, 256]))

@tf.function
def train_step(x):
    with tf.device(device):
        return tf.reduce_sum(tf.tanh(tf.matmul(x, w)))

it = iter(ds)
for _ in range(3):
    train_step(next(it)).numpy()
tf.profiler.experimental.start(logdir)
for step in range(steps):
    with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
        train_step(next(it)).numpy()  # .numpy() syncs, so the step includes the device work
tf.profiler.experimental.stop()
PYEOF

echo "gpu_check: recording ($MODE) ..."
GPU_CHECK_MODE="$MODE" "$PY" "$WORK/record.py" "$WORK/logdir" 20 | tee "$OUT/record.log"
mkdir -p "$OUT/trace"
cp -r "$WORK/logdir/." "$OUT/trace/"
XPLANE="$(find "$OUT/trace" -name '*.xplane.pb' | head -n 1)"
echo "gpu_check: trace $XPLANE ($(du -h "$XPLANE" | cut -f1))"

if "$PY" -m tftune analyze --help 2>/dev/null | grep -q -- "--json"; then
  echo "gpu_check: tftune analyze --json"
  "$PY" -m tftune analyze "$OUT/trace" --json "$OUT/analysis.json" | tee "$OUT/analysis.txt"
else
  echo "gpu_check: 'tftune analyze' not available here: running probes steps+breakdown"
  "$PY" - "$XPLANE" "$OUT/analysis.json" <<'PYEOF'
import json, sys
from pathlib import Path
from tftune.probes import breakdown, steps, trace
host = trace.load_host(Path(sys.argv[1]))
st = steps.detect_steps(host)
bd = breakdown.compute_breakdown(host, st)
tl = breakdown.extract_timeline(host, st)
out = {
    "device": "GPU" if host.gpu_planes else "CPU_ONLY",
    "planes": [p.name for p in host.planes],
    "step_detection": st.detection, "steps": st.summary(),
    "input_share": bd.input_share, "breakdown": bd.fractions(),
    "per_step": bd.per_step(), "timeline": tl.to_json() if tl else None,
}
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(json.dumps({k: out[k] for k in ("device", "step_detection", "steps", "input_share",
                                      "breakdown")}, indent=1))
PYEOF
fi

echo "gpu_check: XProf input_pipeline_analyzer for comparison"
"$PY" - "$XPLANE" "$OUT/xprof_input_pipeline.json" <<'PYEOF' || echo "gpu_check: xprof not available"
import json, sys
from pathlib import Path
from tftune.probes.traces.xprof_check import xprof_input_pipeline
xp = xprof_input_pipeline([Path(sys.argv[1])])
out = {"hardware_type": xp.hardware_type, "steps": len(xp.steps),
       "mean_step_ms": xp.mean_step_ms, "input_share": xp.input_share,
       "conclusion": xp.conclusion, "per_step": [s.__repr__() for s in xp.steps]}
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(json.dumps({k: out[k] for k in ("hardware_type", "steps", "mean_step_ms", "input_share")}))
PYEOF
echo "gpu_check: done ($MODE); outputs in $OUT"
ls -la "$OUT"
