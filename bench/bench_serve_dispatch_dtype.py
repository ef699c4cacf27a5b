#!/usr/bin/env python3
"""Served greedy tokens and log-probabilities under serve.dispatch_dtype.

Serves MODEL_DIR (a `tutti export`) with fp32 dispatch on one rank, then
with int8 on one and two ranks and fp8 on one, each in turn on its own
port; sends the same greedy completions of lines from the Python
documentation's library pages (Debian's python3-doc) to each, and prints
per 8-bit run the share of tokens equal to fp32's and the chosen tokens'
log-probability drift up to each request's first different token; and
whether int8 gave the same tokens and log-probabilities at EP 1 and 2.

  bench/bench_serve_dispatch_dtype.py MODEL_DIR [BUILD_DIR]
  env: OUT (default /tmp/bench_serve_dispatch_dtype), PORT (18460),
       PROMPTS (16), MAX_TOKENS (60)
"""
import glob, json, os, random, subprocess, sys, time, urllib.request

model = os.path.abspath(sys.argv[1])
build = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else
                        os.path.join(os.path.dirname(__file__), "..", "build"))
tutti = os.path.join(build, "apps", "tutti")
out = os.environ.get("OUT", "/tmp/bench_serve_dispatch_dtype")
port = int(os.environ.get("PORT", "18460"))
max_tokens = int(os.environ.get("MAX_TOKENS", "60"))
os.makedirs(out, exist_ok=True)

pages = sorted(glob.glob("/usr/share/doc/python3.11/html/_sources/library/*.rst.txt"))
random.seed(3)
prompts = []
for page in random.sample(pages, int(os.environ.get("PROMPTS", "16"))):
    lines = [l.strip() for l in open(page, errors="replace") if len(l.strip()) > 60]
    if lines:
        prompts.append(lines[len(lines) // 2][:60])


def serve(name, dtype, ranks, at):
    config = os.path.join(out, name + ".yaml")
    with open(config, "w") as f:
        f.write(f"serve:\n  model: {model}\n  listen: 127.0.0.1:{at}\n"
                f"  ep_size: {ranks}\n  dispatch_dtype: {dtype}\n  log_dir: {out}\n")
    proc = subprocess.Popen([tutti, "serve", config], stdout=open(config + ".log", "w"),
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{at}/ready", timeout=2)
                break
            except Exception:
                if time.time() > deadline or proc.poll() is not None:
                    sys.exit(f"{name}: not ready in 60 s (see {config}.log)")
                time.sleep(0.5)
        got = []
        for prompt in prompts:
            body = json.dumps({"prompt": prompt, "max_tokens": max_tokens,
                               "temperature": 0, "logprobs": 0}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{at}/v1/completions", body,
                                         {"Content-Type": "application/json"})
            choice = json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]
            got.append((choice["token_ids"], choice["logprobs"]["token_logprobs"]))
        return got
    finally:
        proc.terminate()
        proc.wait(timeout=30)


runs = {}
for i, (name, dtype, ranks) in enumerate([("fp32_ep1", "fp32", 1), ("int8_ep1", "int8", 1),
                                          ("int8_ep2", "int8", 2), ("fp8_ep1", "fp8", 1)]):
    runs[name] = serve(name, dtype, ranks, port + i)
base = runs["fp32_ep1"]
for name in ("int8_ep1", "int8_ep2", "fp8_ep1"):
    same = total = 0
    drift = []
    for (t0, l0), (t1, l1) in zip(base, runs[name]):
        agreed = True
        for a, b, la, lb in zip(t0, t1, l0, l1):
            total += 1
            same += a == b
            if agreed:
                drift.append(abs(la - lb))
            agreed = agreed and a == b
    print(f"{name}: greedy tokens as with fp32 dispatch {same}/{total}; log-probability "
          f"drift mean {sum(drift) / len(drift):.5f}, max {max(drift):.5f}")
print("int8 at EP 1 and 2, the same tokens and log-probabilities:",
      runs["int8_ep1"] == runs["int8_ep2"])
