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
GGML_F32, GGML_F16 = 0, 1


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
    def add_tensor(self, name, array, f16=False):
        arr = np.ascontiguousarray(array, dtype=np.float16 if f16 else np.float32)
        self.tensors.append((name, arr))

    def write(self, path):
        out = bytearray()
        out += GGUF_MAGIC
        out += struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))
        for key, typ, payload in self.kv:
            out += _str(key) + struct.pack("<I", typ) + payload
        offset = 0
        offsets = []
        for name, arr in self.tensors:
            offsets.append(offset)
            dims = list(reversed(arr.shape))
            ggml_type = GGML_F16 if arr.dtype == np.float16 else GGML_F32
            out += _str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            out += struct.pack("<IQ", ggml_type, offset)
            offset += arr.nbytes
            offset += (-offset) % ALIGNMENT
        out += b"\x00" * ((-len(out)) % ALIGNMENT)
        for (name, arr), off in zip(self.tensors, offsets):
            data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
            out += data
            out += b"\x00" * ((-len(out)) % ALIGNMENT)
        with open(path, "wb") as f:
            f.write(out)
        return len(out)
