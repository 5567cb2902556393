#!/usr/bin/env bash
# Real-GPU check of the node agent: start it WITHOUT --simulate, run every probe (locally and over
# signed HTTP), dump what each NVML call returns on this driver, save everything under $OUT/.
#
# Run from the repository root on a GPU host:
#   OUT=/tmp/gpu-check bash deploy/node-agent/gpu-check.sh
# With the `run` device tool (no network there; pynvml is one pure-Python file, carried from the venv):
#   run(carry=[".venv/lib/python3.11/site-packages/pynvml.py"], timeout_s=300,
#       command="bash deploy/node-agent/gpu-check.sh")
# What to look for afterwards: $OUT/summary.txt, then nvml-dump.json for field shapes and NOT_SUPPORTED
# cases worth turning into scenario data and tests.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

PY="${PY:-}"
for cand in "$PWD/.venv/bin/python" python3; do
  [ -z "$PY" ] && "$cand" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null && PY="$cand"
done
[ -z "$PY" ] && { echo "need Python >= 3.11"; exit 2; }
# pynvml: installed, or the single file carried from the venv (kept alone on PYTHONPATH so no other
# venv package, built for another interpreter, gets imported).
EXTRA="$(mktemp -d)"
if ! "$PY" -c 'import pynvml' 2>/dev/null; then
  f=$(ls .venv/lib/python3*/site-packages/pynvml.py 2>/dev/null | head -1)
  [ -n "$f" ] && cp "$f" "$EXTRA/"
fi
export PYTHONPATH="$PWD:$EXTRA${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c 'import pynvml, node_agent; print("pynvml from", pynvml.__file__)' || { echo "pynvml not importable"; exit 2; }

step "host facts"
{ uname -a; id; "$PY" --version; cat /proc/driver/nvidia/version; ls -l /dev/nvidia* ; sysctl kernel.dmesg_restrict;
  ls -l /sys/class/infiniband/ 2>&1; systemctl is-active nvidia-fabricmanager 2>&1; nvidia-smi -L; } \
  > "$OUT/host-facts.txt" 2>&1
cat "$OUT/host-facts.txt"
timeout 60 nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1
timeout 60 nvidia-smi topo -m > "$OUT/nvidia-smi-topo.txt" 2>&1

step "raw NVML dump: every allowed call on every GPU (values, error classes, timings)"
timeout 300 "$PY" - "$OUT/nvml-dump.json" <<'PYEOF'
import json, sys, time
import pynvml
from node_agent.nvml.convert import plain
from node_agent.nvml.worker import ALLOWED, Worker, error_payload

ARGS = {  # one plausible argument set per call that takes more than a handle
    "nvmlDeviceGetTotalEccErrors": [(1, 0), (0, 0), (1, 1), (0, 1)],
    "nvmlDeviceGetRetiredPages": [(0,), (1,)],
    "nvmlDeviceGetFieldValues": [([230],), ([91, 38, 45, 52, 59, 160],), ([165],)],
    "nvmlDeviceGetTemperatureV": [(0,)], "nvmlDeviceGetTemperature": [(0,)],
    "nvmlDeviceGetTemperatureThreshold": [(0,), (1,)],
    "nvmlDeviceGetNvLinkState": [(0,), (17,), (18,)],
    "nvmlDeviceGetNvLinkErrorCounter": [(0, k) for k in range(5)],
    "nvmlDeviceGetMemoryInfo": [(), ("v2",)],
}
w = Worker(pynvml, "real")
out = {"pynvml": getattr(pynvml, "__version__", None), "calls": []}
t = time.perf_counter()
try:
    out["init"] = w.op_init()
except Exception as exc:
    out["init_error"] = error_payload(exc)
    json.dump(out, open(sys.argv[1], "w"), indent=1); print(out["init_error"]); sys.exit(0)
out["init_ms"] = round((time.perf_counter() - t) * 1000, 1)
count = out["init"].get("count") or 0
for gpu in [None, *range(count)]:
    for fn in sorted(ALLOWED):
        if (gpu is None) != fn.startswith("nvmlSystem") and fn != "nvmlDeviceGetCount":
            continue
        if fn == "nvmlDeviceGetCount" and gpu is not None:
            continue
        for args in ARGS.get(fn, [()] if fn != "nvmlSystemGetProcessName" else [(1,)]):
            t = time.perf_counter()
            rec = {"fn": fn, "gpu": gpu, "args": list(args)}
            try:
                rec["value"] = w.call(fn, gpu, list(args))
            except Exception as exc:
                rec["error"] = error_payload(exc)
            rec["ms"] = round((time.perf_counter() - t) * 1000, 2)
            out["calls"].append(rec)
out["events"] = w.op_events()
json.dump(out, open(sys.argv[1], "w"), indent=1)
errs = {}
for c in out["calls"]:
    if "error" in c:
        errs.setdefault((c["fn"], c["error"]["name"]), []).append(c["gpu"])
print(f"{len(out['calls'])} calls, init {out['init_ms']} ms; errors by call:")
for (fn, name), gpus in sorted(errs.items()):
    print(f"  {fn}: {name} on {sorted(set(map(str, gpus)))}")
PYEOF

step "node-agent probe (local, all probes, twice: cold then warm)"
TIMEFORMAT="%R s wall"
for i in 1 2; do
  echo -n "round $i: "
  time timeout 120 "$PY" -m node_agent probe --json > "$OUT/probe-local-$i.json" 2> "$OUT/probe-local-$i.err"
  echo "exit $? (1 = some probe failed)"; cat "$OUT/probe-local-$i.err"
done
timeout 120 "$PY" -m node_agent probe > "$OUT/probe-local.txt" 2>&1; cat "$OUT/probe-local.txt"

step "node-agent serve + signed HTTP"
SECRET="$OUT/agent.secret"; (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$SECRET")
PORT=$(( 20000 + RANDOM % 20000 ))
"$PY" -m node_agent serve --listen "127.0.0.1:$PORT" --secret-file "$SECRET" > "$OUT/agent.log" 2>&1 &
AGENT=$!
for _ in $(seq 1 100); do grep -q "listening on" "$OUT/agent.log" && break; sleep 0.1; done
sleep 2  # the NVML worker initializes in the background
grep VmRSS /proc/$AGENT/status | sed 's/^/agent /'
for c in $(cat /proc/$AGENT/task/*/children 2>/dev/null); do grep VmRSS /proc/$c/status | sed 's/^/worker /'; done
timeout 60 "$PY" - "$PORT" "$SECRET" "$OUT" <<'PYEOF'
import json, sys, time
from bot.probes.client import AgentDirectory, fetch_catalogue, probe_hosts
from node_agent.auth import load_secret
port, secret, out = sys.argv[1], load_secret(sys.argv[2]), sys.argv[3]
d = AgentDirectory(f"http://127.0.0.1:{port}")
cat = fetch_catalogue(d, "local", secret)
json.dump(cat.to_dict(), open(f"{out}/catalogue.json", "w"), indent=1)
for i in range(3):
    t = time.perf_counter()
    rep = probe_hosts(d, ["local"], secret, deadline_s=20)["local"]
    print(f"HTTP round {i}: {(time.perf_counter() - t) * 1000:.0f} ms, reachable={rep.reachable}, "
          f"agent {rep.answer.get('duration_ms')} ms")
    json.dump(rep.to_dict(), open(f"{out}/probe-http-{i}.json", "w"), indent=1)
for r in rep.results:
    print(f"  {r['health']:<9} {r['probe']:<11} {r['duration_ms']:>5} ms  {r['reason']}")
PYEOF
kill $AGENT; wait $AGENT 2>/dev/null

step "summary"
{ ls -l "$OUT"; echo; cat "$OUT/probe-local.txt"; } > "$OUT/summary.txt.tmp"
mv "$OUT/summary.txt.tmp" "$OUT/summary.txt"
head -60 "$OUT/summary.txt"
rm -rf "$EXTRA"
