#!/usr/bin/env bash
# Installs dependencies, builds, makes the quickstart data (an order-2 Markov
# source with a known entropy rate) and trains the quickstart model on it.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install-deps.sh
./deploy/build.sh
data=runs/quickstart/data
if [ ! -f "$data/meta.json" ]; then
  ./build/apps/tutti data synth --out "$data" --vocab 16 --seed 7 --tokens 4000000
fi
exec ./build/apps/tutti run configs/quickstart.yaml
