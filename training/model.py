"""The bundled model: a tiny llama (RMSNorm, SwiGLU, RoPE on adjacent pairs) in torch,
and its export to GGUF with the project's own writer.

The math matches llama.cpp's LLAMA architecture exactly (rope type NORM rotates
adjacent pairs (x0, x1), (x2, x3), ...), so Q/K weights are written without the
permutation that Hugging Face checkpoints need.
"""
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from gguf_writer import GGUFWriter

HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLED_MODEL_NAME = "pagantic-tiny"  # = BUNDLED_MODEL_NAME in src/layers/llama/PaganticChatWrapper.ts

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}<|system|>{{ message['content'] }}"
    "{% elif message['role'] == 'user' %}<|user|>{{ message['content'] }}"
    "{% elif message['role'] == 'assistant' %}<|assistant|>{{ message['content'] }}<|end|>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


class Config:
    def __init__(self, vocab_size, dim=128, n_layers=4, n_heads=4, ffn=384, ctx=2048, rope_base=10000.0, eps=1e-5, dropout=0.0):
        self.dropout = dropout
        self.vocab_size = vocab_size
        self.dim = dim
        self.n_layers = n_layers
        self.n_heads = n_heads
        self.ffn = ffn
        self.ctx = ctx
        self.rope_base = rope_base
        self.eps = eps

    def to_dict(self):
        return dict(self.__dict__)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim, n_pos, base):
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    ang = torch.arange(n_pos, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x, cos, sin):
    # x: (B, H, T, D); adjacent pairs (x0, x1), (x2, x3), ...
    x0 = x[..., 0::2]
    x1 = x[..., 1::2]
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    return torch.stack((r0, r1), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.attn_norm = RMSNorm(c.dim, c.eps)
        self.wq = nn.Linear(c.dim, c.dim, bias=False)
        self.wk = nn.Linear(c.dim, c.dim, bias=False)
        self.wv = nn.Linear(c.dim, c.dim, bias=False)
        self.wo = nn.Linear(c.dim, c.dim, bias=False)
        self.ffn_norm = RMSNorm(c.dim, c.eps)
        self.w_gate = nn.Linear(c.dim, c.ffn, bias=False)
        self.w_up = nn.Linear(c.dim, c.ffn, bias=False)
        self.w_down = nn.Linear(c.ffn, c.dim, bias=False)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x, cos, sin, mask):
        B, T, D = x.shape
        H = self.c.n_heads
        hd = D // H
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, H, hd).transpose(1, 2)
        k = self.wk(h).view(B, T, H, hd).transpose(1, 2)
        v = self.wv(h).view(B, T, H, hd).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.drop(self.wo(o))
        h = self.ffn_norm(x)
        return x + self.drop(self.w_down(F.silu(self.w_gate(h)) * self.w_up(h)))


class TinyLlama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok = nn.Embedding(c.vocab_size, c.dim)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.n_layers)])
        self.norm = RMSNorm(c.dim, c.eps)
        self.out = nn.Linear(c.dim, c.vocab_size, bias=False)
        self.apply(self._init)
        for b in self.blocks:
            nn.init.normal_(b.wo.weight, std=0.02 / math.sqrt(2 * c.n_layers))
            nn.init.normal_(b.w_down.weight, std=0.02 / math.sqrt(2 * c.n_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx):
        B, T = idx.shape
        cos, sin = rope_tables(self.c.dim // self.c.n_heads, T, self.c.rope_base)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        x = self.tok(idx)
        for b in self.blocks:
            x = b(x, cos, sin, mask)
        return self.out(self.norm(x))


def load_vocab(path=os.path.join(HERE, "vocab.json")):
    with open(path) as f:
        return json.load(f)


def export_gguf(model, vocab, path, f16=True, dtype=None):
    """Writes the model as GGUF; dtype ("f32", "f16", "q8_0", "q4_0") is the type of the matrices (norms stay f32)."""
    dtype = dtype or ("f16" if f16 else "f32")
    c = model.c
    w = GGUFWriter()
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", BUNDLED_MODEL_NAME)
    w.add_string("general.description", "pagantic's bundled tiny model: sentiment JSON and calculator tool calls")
    w.add_string("general.license", "MIT")
    w.add_uint32("general.file_type", {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7}[dtype])
    w.add_uint32("general.alignment", 32)
    w.add_uint32("llama.context_length", c.ctx)
    w.add_uint32("llama.embedding_length", c.dim)
    w.add_uint32("llama.block_count", c.n_layers)
    w.add_uint32("llama.feed_forward_length", c.ffn)
    w.add_uint32("llama.attention.head_count", c.n_heads)
    w.add_uint32("llama.attention.head_count_kv", c.n_heads)
    w.add_uint32("llama.rope.dimension_count", c.dim // c.n_heads)
    w.add_float32("llama.rope.freq_base", c.rope_base)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", c.eps)
    w.add_uint32("llama.vocab_size", c.vocab_size)
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_string_array("tokenizer.ggml.tokens", vocab["tokens"])
    w.add_float32_array("tokenizer.ggml.scores", vocab["scores"])
    w.add_int32_array("tokenizer.ggml.token_type", vocab["types"])
    w.add_uint32("tokenizer.ggml.bos_token_id", vocab["bos"])
    w.add_uint32("tokenizer.ggml.eos_token_id", vocab["eos"])
    w.add_uint32("tokenizer.ggml.unknown_token_id", vocab["unk"])
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_eos_token", False)
    w.add_bool("tokenizer.ggml.add_space_prefix", False)
    w.add_string("tokenizer.chat_template", CHAT_TEMPLATE)

    sd = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    big = lambda name, arr: w.add_tensor(name, arr, dtype=dtype)
    small = lambda name, arr: w.add_tensor(name, arr, f16=False)
    big("token_embd.weight", sd["tok.weight"])
    small("output_norm.weight", sd["norm.weight"])
    big("output.weight", sd["out.weight"])
    for i in range(c.n_layers):
        p = f"blocks.{i}."
        q = f"blk.{i}."
        small(q + "attn_norm.weight", sd[p + "attn_norm.weight"])
        big(q + "attn_q.weight", sd[p + "wq.weight"])
        big(q + "attn_k.weight", sd[p + "wk.weight"])
        big(q + "attn_v.weight", sd[p + "wv.weight"])
        big(q + "attn_output.weight", sd[p + "wo.weight"])
        small(q + "ffn_norm.weight", sd[p + "ffn_norm.weight"])
        big(q + "ffn_gate.weight", sd[p + "w_gate.weight"])
        big(q + "ffn_up.weight", sd[p + "w_up.weight"])
        big(q + "ffn_down.weight", sd[p + "w_down.weight"])
    return w.write(path)


def load_gguf(path, dropout=0.0):
    """A TinyLlama with the weights of a GGUF this module exported (F32/F16), and its config."""
    from gguf_writer import read_gguf

    kv, t = read_gguf(path)
    c = Config(
        int(kv["llama.vocab_size"]), int(kv["llama.embedding_length"]), int(kv["llama.block_count"]),
        int(kv["llama.attention.head_count"]), int(kv["llama.feed_forward_length"]), ctx=int(kv["llama.context_length"]),
        rope_base=float(kv["llama.rope.freq_base"]), eps=float(kv["llama.attention.layer_norm_rms_epsilon"]),
        dropout=dropout,
    )
    m = TinyLlama(c)
    sd = {"tok.weight": t["token_embd.weight"], "norm.weight": t["output_norm.weight"], "out.weight": t["output.weight"]}
    for i in range(c.n_layers):
        p, q = f"blocks.{i}.", f"blk.{i}."
        for mine, theirs in [("attn_norm", "attn_norm"), ("wq", "attn_q"), ("wk", "attn_k"), ("wv", "attn_v"), ("wo", "attn_output"),
                             ("ffn_norm", "ffn_norm"), ("w_gate", "ffn_gate"), ("w_up", "ffn_up"), ("w_down", "ffn_down")]:
            sd[p + mine + ".weight"] = t[q + theirs + ".weight"]
    missing = set(m.state_dict().keys()) - set(sd.keys())
    if missing:
        raise ValueError(f"{path}: no tensor for {sorted(missing)}")
    m.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in sd.items()})
    return m, c


if __name__ == "__main__":
    # Export randomly initialised weights (used to tokenize the training set, and as a placeholder).
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "out", "init.gguf"))
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=384)
    a = ap.parse_args()
    torch.manual_seed(0)
    vocab = load_vocab()
    m = TinyLlama(Config(len(vocab["tokens"]), a.dim, a.layers, a.heads, a.ffn))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    print("wrote", a.out, export_gguf(m, vocab, a.out), "bytes")
