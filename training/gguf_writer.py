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


# ---------------------------------------------------------------------------
# Reading (F32/F16 tensors): to go on training from a committed model
# ---------------------------------------------------------------------------

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path):
    """Returns (kv: dict, tensors: dict name -> numpy float32 array in torch (out, in) order) of an F32/F16 GGUF v3."""
    data = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(typ):
        if typ == T_STRING:
            return string()
        if typ == 9:
            inner, n = take("<I"), take("<Q")
            return [value(inner) for _ in range(n)]
        return take(_SCALAR[typ])

    if data[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    pos = 4
    version, n_tensors, n_kv = take("<I"), take("<Q"), take("<Q")
    if version != 3:
        raise ValueError(f"{path}: GGUF version {version}, expected 3")
    kv = {}
    for _ in range(n_kv):
        key = string()
        kv[key] = value(take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        n_dims = take("<I")
        dims = [take("<Q") for _ in range(n_dims)]
        ggml_type, offset = take("<I"), take("<Q")
        infos.append((name, dims, ggml_type, offset))
    align = kv.get("general.alignment", ALIGNMENT)
    base = pos + (-pos) % align
    tensors = {}
    for name, dims, ggml_type, offset in infos:
        count = int(np.prod(dims))
        if ggml_type == 0:
            arr = np.frombuffer(data, dtype="<f4", count=count, offset=base + offset)
        elif ggml_type == 1:
            arr = np.frombuffer(data, dtype="<f2", count=count, offset=base + offset)
        else:
            raise ValueError(f"{path}: tensor {name} has ggml type {ggml_type}; only F32/F16 can be read")
        tensors[name] = arr.astype(np.float32).reshape(list(reversed(dims)))
    return kv, tensors
