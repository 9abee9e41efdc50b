#!/usr/bin/env bash
# Rebuilds models/pagantic-tiny.gguf from scratch (not run by CI).
#   training/run.sh [minutes]
# Needs Debian's torch: apt-get install -y python3-torch libopenblas0-pthread
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES="${1:-65}"
export OPENBLAS_NUM_THREADS=1
PY=/usr/bin/python3

npx tsx training/generate.ts --train 150000 --seed 1         # render through PaganticChatWrapper
$PY training/vocab.py --size 1280                            # learn the vocabulary -> training/vocab.json
$PY training/model.py --out training/out/init.gguf           # vocab + random weights, to tokenize with llama.cpp
npx tsx training/tokenize.ts training/out/init.gguf          # exact llama.cpp tokens + assistant-only loss mask
$PY training/train.py --minutes "$MINUTES" --out training/out/model.gguf
cp training/out/model.gguf models/pagantic-tiny.gguf
npx tsx training/measure.ts models/pagantic-tiny.gguf        # held-out numbers through node-llama-cpp
