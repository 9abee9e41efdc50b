"""A minimal GGUF v3 writer (the subset the bundled model needs).

Reference: llama.cpp's gguf-py (node_modules/node-llama-cpp/llama/gitRelease.bundle).
Tensors are numpy arrays in torch layout (out, in); GGUF dims are written innermost
first, so a Linear weight (out, in) becomes dims [in, out] with the same bytes.
"""
import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = range(13)
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0 = 0, 1, 2, 8
QK = 32  # weights per quantization block (Q4_0 and Q8_0)


def quantize_q8_0(arr):
    """llama.cpp's Q8_0: per block of 32 weights, an f16 scale d = max|x| / 127 and 32 int8 x / d."""
    x = np.asarray(arr, dtype=np.float32).reshape(-1, QK)
    d = np.abs(x).max(axis=1) / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0)
    q = np.round(x * inv[:, None]).astype(np.int8)
    blocks = np.zeros(x.shape[0], dtype=[("d", "<f2"), ("q", "i1", (QK,))])
    blocks["d"] = d.astype(np.float16)
    blocks["q"] = q
    return blocks.tobytes()


def quantize_q4_0(arr):
    """llama.cpp's Q4_0: per block, d = max / -8 (max: the value of largest magnitude) and 4-bit
    q = x / d + 8; values 0-15 stored low nibbles first (weights 0-15), then high nibbles (16-31)."""
    x = np.asarray(arr, dtype=np.float32).reshape(-1, QK)
    idx = np.abs(x).argmax(axis=1)
    mx = x[np.arange(x.shape[0]), idx]
    d = mx / -8.0
    inv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1), 0.0)
    q = np.clip(np.floor(x * inv[:, None] + 8.5), 0, 15).astype(np.uint8)
    packed = q[:, : QK // 2] | (q[:, QK // 2 :] << 4)
    blocks = np.zeros(x.shape[0], dtype=[("d", "<f2"), ("q", "u1", (QK // 2,))])
    blocks["d"] = d.astype(np.float16)
    blocks["q"] = packed
    return blocks.tobytes()


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class GGUFWriter:
    def __init__(self):
        self.kv = []  # (key, type, payload bytes)
        self.tensors = []  # (name, np.ndarray)

    # --- metadata -------------------------------------------------------------
    def add_string(self, key, value):
        self.kv.append((key, T_STRING, _str(value)))

    def add_uint32(self, key, value):
        self.kv.append((key, T_UINT32, struct.pack("<I", value)))

    def add_int32(self, key, value):
        self.kv.append((key, T_INT32, struct.pack("<i", value)))

    def add_float32(self, key, value):
        self.kv.append((key, T_FLOAT32, struct.pack("<f", value)))

    def add_bool(self, key, value):
        self.kv.append((key, T_BOOL, struct.pack("<?", value)))

    def add_string_array(self, key, values):
        payload = struct.pack("<IQ", T_STRING, len(values)) + b"".join(_str(v) for v in values)
        self.kv.append((key, T_ARRAY, payload))

    def add_float32_array(self, key, values):
        payload = struct.pack("<IQ", T_FLOAT32, len(values)) + np.asarray(values, dtype="<f4").tobytes()
        self.kv.append((key, T_ARRAY, payload))

    def add_int32_array(self, key, values):
        payload = struct.pack("<IQ", T_INT32, len(values)) + np.asarray(values, dtype="<i4").tobytes()
        self.kv.append((key, T_ARRAY, payload))

    # --- tensors --------------------------------------------------------------
    def add_tensor(self, name, array, f16=False, dtype=None):
        """dtype: "f32", "f16", "q8_0" or "q4_0" (quantized along the innermost dimension, a multiple of 32)."""
        dtype = dtype or ("f16" if f16 else "f32")
        shape = tuple(np.shape(array))
        if dtype == "f32":
            data, ggml_type = np.ascontiguousarray(array, dtype="<f4").tobytes(), GGML_F32
        elif dtype == "f16":
            data, ggml_type = np.ascontiguousarray(array, dtype="<f2").tobytes(), GGML_F16
        elif dtype in ("q8_0", "q4_0"):
            if shape[-1] % QK != 0:
                raise ValueError(f"{name}: innermost dimension {shape[-1]} is not a multiple of {QK}")
            quantize = quantize_q8_0 if dtype == "q8_0" else quantize_q4_0
            data, ggml_type = quantize(array), (GGML_Q8_0 if dtype == "q8_0" else GGML_Q4_0)
        else:
            raise ValueError(f"unknown tensor type {dtype}")
        self.tensors.append((name, shape, ggml_type, data))

    def write(self, path):
        out = bytearray()
        out += GGUF_MAGIC
        out += struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))
        for key, typ, payload in self.kv:
            out += _str(key) + struct.pack("<I", typ) + payload
        offset = 0
        for name, shape, ggml_type, data in self.tensors:
            dims = list(reversed(shape))
            out += _str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            out += struct.pack("<IQ", ggml_type, offset)
            offset += len(data)
            offset += (-offset) % ALIGNMENT
        out += b"\x00" * ((-len(out)) % ALIGNMENT)
        for name, shape, ggml_type, data in self.tensors:
            out += data
            out += b"\x00" * ((-len(out)) % ALIGNMENT)
        with open(path, "wb") as f:
            f.write(out)
        return len(out)
