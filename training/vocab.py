"""Builds the bundled model's SentencePiece-style ("llama") vocabulary.

    /usr/bin/python3 training/vocab.py [--size 1280]

Reads training/out/corpus.jsonl (plain-text pieces written by generate.ts) and
learns BPE merges over whitespace-escaped text ("▁" for a space). Each merge
becomes a piece whose score is minus its rank, so llama.cpp's SPM tokenizer
(highest-score bigram first) reproduces the merge order. Digits and newlines are
never merged, so numbers are copied digit by digit and the function-call syntax
("name\\n{json}") tokenizes the same in every context.

Writes training/vocab.json (committed): tokens, scores, types and special ids.
"""
import argparse
import collections
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))

# token types (llama.cpp LLAMA_TOKEN_TYPE_*)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

CONTROL_TOKENS = ["<unk>", "<s>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
USER_TOKENS = ["<tool_call>", "</tool_call>", "<tool_result>", "</tool_result>"]
SPACE = "\u2581"

PRETOKEN = re.compile(SPACE + "?[A-Za-z']+|" + SPACE + "?[^A-Za-z0-9\\n" + SPACE + "]+|" + SPACE + "|[0-9]|\\n")


def base_chars():
    chars = [chr(c) for c in range(0x21, 0x7F)]
    return [SPACE, "\n"] + chars


def learn_merges(word_counts, n_merges):
    words = {tuple(w): c for w, c in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                if a[-1].isdigit() or b[0].isdigit() or a == "\n" or b == "\n":
                    continue
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), count = pairs.most_common(1)[0]
        if count < 20:
            break
        merged = a + b
        merges.append(merged)
        new_words = {}
        for w, c in words.items():
            out = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(merged)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] = new_words.get(tuple(out), 0) + c
        words = new_words
    return merges


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1280)
    ap.add_argument("--corpus", default=os.path.join(HERE, "out", "corpus.jsonl"))
    ap.add_argument("--out", default=os.path.join(HERE, "vocab.json"))
    args = ap.parse_args()

    user_re = re.compile("(" + "|".join(re.escape(t) for t in USER_TOKENS) + ")")
    word_counts = collections.Counter()
    with open(args.corpus) as f:
        for line in f:
            text = json.loads(line)
            for part in user_re.split(text):
                if part in USER_TOKENS or part == "":
                    continue
                for m in PRETOKEN.findall(part.replace(" ", SPACE)):
                    word_counts[m] += 1

    tokens, scores, types = [], [], []

    def add(tok, score, typ):
        tokens.append(tok)
        scores.append(score)
        types.append(typ)

    for t in CONTROL_TOKENS:
        add(t, 0.0, UNKNOWN if t == "<unk>" else CONTROL)
    for t in USER_TOKENS:
        add(t, 0.0, USER_DEFINED)
    for b in range(256):
        add("<0x%02X>" % b, 0.0, BYTE)
    chars = base_chars()
    for ch in chars:
        add(ch, -1e6, NORMAL)
    n_merges = args.size - len(tokens)
    merges = learn_merges(word_counts, n_merges)
    seen = set(tokens)
    for rank, m in enumerate(merges):
        if m in seen:
            continue
        seen.add(m)
        add(m, -float(rank + 1), NORMAL)

    vocab = {
        "tokens": tokens,
        "scores": scores,
        "types": types,
        "bos": CONTROL_TOKENS.index("<s>"),
        "eos": CONTROL_TOKENS.index("<|end|>"),
        "unk": CONTROL_TOKENS.index("<unk>"),
    }
    with open(args.out, "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    print("vocab size", len(tokens), "merges", len(merges))
    print("longest pieces:", sorted(merges, key=len)[-20:])


if __name__ == "__main__":
    main()
