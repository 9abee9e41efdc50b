#!/usr/bin/env bash
# Rebuilds the bundled model from scratch (not run by CI).
#   training/run.sh [minutes] [finetune-minutes]
#
# Stage 1 trains from random weights for `minutes` (default 60) on everything:
# sentiment (older templates and everyday reviews in real vocabulary), calculator,
# chat and task decomposition. Stage 2, when finetune-minutes > 0, goes on from
# stage 1's checkpoint at a lower learning rate on a fresh sample (another seed)
# in which decomposition requests are rendered through the orchestrator's own
# analyzer prompt (generate.ts --analyzer). The result is training/out/model.gguf
# and training/out/model-info.json; copy them to models/pagantic-tiny.gguf and
# training/model-info.json only when `npm run eval -- --model training/out/model.gguf`
# shows the earlier figures kept (see training/README.md).
#
# Needs Debian's torch: apt-get install -y python3-torch libopenblas0-pthread,
# and the word lists: npm --prefix training ci
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES="${1:-60}"
FINETUNE_MINUTES="${2:-0}"
export OPENBLAS_NUM_THREADS=1
PY=/usr/bin/python3

[ -d training/node_modules ] || npm --prefix training ci --no-audit --no-fund
npx tsx training/generate.ts --train 150000 --seed 1         # render through PaganticChatWrapper
$PY training/vocab.py --size 2048                            # learn the vocabulary -> training/vocab.json
$PY training/model.py --out training/out/init.gguf           # vocab + random weights, to tokenize with llama.cpp
npx tsx training/tokenize.ts training/out/init.gguf          # exact llama.cpp tokens + assistant-only loss mask
$PY training/train.py --minutes "$MINUTES" --out training/out/model.gguf
if [ "$FINETUNE_MINUTES" != "0" ]; then
  npx tsx training/generate.ts --train 60000 --seed 2 --analyzer  # same vocabulary (vocab.json is not relearned)
  npx tsx training/tokenize.ts training/out/init.gguf
  $PY training/train.py --resume --lr 1e-3 --minutes "$FINETUNE_MINUTES" --out training/out/model.gguf
fi
$PY - <<'EOF'
import hashlib, json
info = json.load(open("training/out/train-info.json"))
info["sha256"] = hashlib.sha256(open("training/out/model.gguf", "rb").read()).hexdigest()
json.dump(info, open("training/out/model-info.json", "w"), indent=2)
print(info)
EOF
npx tsx training/measure.ts training/out/model.gguf          # held-out numbers through node-llama-cpp
