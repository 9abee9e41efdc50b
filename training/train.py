"""Trains the bundled model on the tokenized set and exports it to GGUF.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 training/train.py --minutes 40 --out models/pagantic-tiny.gguf

Reads training/out/{tokens.u16, mask.u8, lengths.u32} (written by tokenize.ts).
The loss is on the assistant's tokens only (mask = 1). Exports the GGUF every
--export-every minutes and at the end; checkpoints go to training/out/ckpt.pt.
"""
import argparse
import json
import math
import sys
import os
import random
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import torch
import torch.nn.functional as F

from model import Config, TinyLlama, export_gguf, load_gguf, load_vocab

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")


def load_data():
    tokens = np.fromfile(os.path.join(OUT, "tokens.u16"), dtype=np.uint16).astype(np.int64)
    mask = np.fromfile(os.path.join(OUT, "mask.u8"), dtype=np.uint8)
    lengths = np.fromfile(os.path.join(OUT, "lengths.u32"), dtype=np.uint32).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return tokens, mask, lengths, offsets


def make_batches(lengths, budget, rng):
    idx = list(range(len(lengths)))
    rng.shuffle(idx)
    batches = []
    for s in range(0, len(idx), 1024):
        chunk = sorted(idx[s:s + 1024], key=lambda i: lengths[i])
        cur = []
        for i in chunk:
            if cur and (len(cur) + 1) * max(lengths[i], lengths[cur[-1]]) > budget:
                batches.append(cur)
                cur = []
            cur.append(i)
        if cur:
            batches.append(cur)
    rng.shuffle(batches)
    return batches


def collate(batch, tokens, mask, lengths, offsets):
    T = int(max(lengths[i] for i in batch))
    x = np.zeros((len(batch), T), dtype=np.int64)
    m = np.zeros((len(batch), T), dtype=np.float32)
    for r, i in enumerate(batch):
        o, n = offsets[i], lengths[i]
        x[r, :n] = tokens[o:o + n]
        m[r, :n] = mask[o:o + n]
    x = torch.from_numpy(x)
    m = torch.from_numpy(m)
    # predict token t+1 from prefix up to t; the target's mask decides the loss
    return x[:, :-1], x[:, 1:], m[:, 1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--budget", type=int, default=3072, help="tokens per batch (rows x padded length)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=384)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--out", default=os.path.join(OUT, "model.gguf"))
    ap.add_argument("--export-every", type=float, default=10.0, help="minutes")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init-gguf", default=None, help="start from the weights of this GGUF (its shape; its vocabulary must be vocab.json)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    vocab = load_vocab()
    tokens, mask, lengths, offsets = load_data()
    if args.init_gguf:
        model, cfg = load_gguf(args.init_gguf, dropout=args.dropout)
        if cfg.vocab_size != len(vocab["tokens"]):
            raise SystemExit(f"{args.init_gguf} has {cfg.vocab_size} tokens, vocab.json {len(vocab['tokens'])}")
        args.dim, args.layers, args.heads, args.ffn = cfg.dim, cfg.n_layers, cfg.n_heads, cfg.ffn
        print("initialised from", args.init_gguf, flush=True)
    else:
        cfg = Config(len(vocab["tokens"]), args.dim, args.layers, args.heads, args.ffn, dropout=args.dropout)
        model = TinyLlama(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params:,}  examples {len(lengths):,}  tokens {len(tokens):,}", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    step = 0
    prior_minutes = 0.0
    ckpt = os.path.join(OUT, "ckpt.pt")
    if args.resume and os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
        prior_minutes = state.get("minutes", 0.0)
        print("resumed at step", step, "after", prior_minutes, "minutes", flush=True)

    # The schedule is defined in time: warm up, then cosine decay to 5% by the deadline.
    t0 = time.time()
    total = args.minutes * 60
    last_export = t0
    warmup = 100
    ema_loss, ema_acc = None, None
    batches = []
    while True:
        if not batches:
            batches = make_batches(lengths, args.budget, rng)
        batch = batches.pop()
        x, y, m = collate(batch, tokens, mask, lengths, offsets)
        elapsed = time.time() - t0
        frac = min(1.0, elapsed / total)
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        model.train()
        logits = model(x)
        loss_all = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="none")
        loss = (loss_all * m.reshape(-1)).sum() / m.sum().clamp(min=1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        with torch.no_grad():
            acc = (((logits.argmax(-1) == y).float() * m).sum() / m.sum().clamp(min=1)).item()
        ema_loss = loss.item() if ema_loss is None else 0.98 * ema_loss + 0.02 * loss.item()
        ema_acc = acc if ema_acc is None else 0.98 * ema_acc + 0.02 * acc
        if step % 50 == 0:
            line = (f"step {step} t {elapsed:.0f}s/{total:.0f}s ({100 * frac:.0f}%) lr {lr:.2e} loss {ema_loss:.4f} "
                    f"tok-acc {ema_acc:.4f} batch {tuple(x.shape)}")
            if sys.stdout.isatty():
                # a live line on a terminal: the bar of the time budget, redrawn in place
                bar = "#" * round(20 * frac) + "-" * (20 - round(20 * frac))
                print(f"\r\x1b[2K[{bar}] {line}", end="", flush=True)
            else:
                print(line, flush=True)
        done = elapsed >= total or step >= args.max_steps
        if done or time.time() - last_export > args.export_every * 60:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "config": cfg.to_dict(),
                        "minutes": prior_minutes + (time.time() - t0) / 60}, ckpt)
            model.eval()
            size = export_gguf(model, vocab, args.out)
            print(f"exported {args.out} ({size} bytes) at step {step}", flush=True)
            last_export = time.time()
        if done:
            break
    info = {
        "shape": f"llama {args.dim} dim x {args.layers} layers, {args.heads} heads, FFN {args.ffn}, vocab {len(vocab['tokens']):,}, F16",
        "parameters": n_params,
        "minutes": round(prior_minutes + (time.time() - t0) / 60, 1),
        "steps": step,
    }
    with open(os.path.join(OUT, "train-info.json"), "w") as f:
        json.dump(info, f)
    print("train-info", info, flush=True)


if __name__ == "__main__":
    main()
