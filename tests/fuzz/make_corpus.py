#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses into tests/fuzz/corpus/<harness>/ (deterministic;
rerun after changing the harnesses' input formats). Seeds are small valid inputs, so the fuzzer
starts from the accepting paths; it finds the rejecting ones by mutation."""
import json
import os
import random
import struct

here = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(1234)


def write(harness, name, data):
    d = os.path.join(here, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors(tensors):
    header, blob = {"__metadata__": {"format": "pt"}}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + blob


write("safetensors", "f32_f16_bf16", safetensors({
    "a": ("F32", [2, 2], struct.pack("<4f", 1.5, -2.0, 0.25, 3.0)),
    "b": ("F16", [3], struct.pack("<3H", 0x3C00, 0xB800, 0x0001)),
    "c": ("BF16", [1, 1], struct.pack("<H", 0x4040)),
    "empty": ("F32", [0, 4], b""),
}))
write("safetensors", "escapes", safetensors({"w\\u00e9ight.\\n": ("F32", [1], struct.pack("<f", 7.0))}))


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(kvs, tensors):
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, (vtype, payload) in kvs:
        out += gguf_string(key) + struct.pack("<I", vtype) + payload
    offset, infos, datas = 0, b"", []
    for name, dims, ttype, data in tensors:
        infos += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", ttype, offset)
        datas.append((offset, data))
        offset += (len(data) + 31) // 32 * 32
    out += infos
    out += b"\0" * ((-len(out)) % 32)
    start = len(out)
    for off, data in datas:
        out += b"\0" * (start + off - len(out)) + data
    return out


def string_array(items):
    return struct.pack("<IQ", 8, len(items)) + b"".join(gguf_string(s) for s in items)


def int_array(items):
    return struct.pack("<IQ", 5, len(items)) + b"".join(struct.pack("<i", x) for x in items)


tokens = ["<|endoftext|>", "<|im_end|>", "h", "e", "l", "o", "\u0120", "w", "r", "d", "he", "ll", "hell", "hello", "\u0120w"]
merges = ["h e", "l l", "he ll", "hell o", "\u0120 w"]
types = [3, 3] + [1] * (len(tokens) - 2)
q8 = struct.pack("<H", 0x3C00) + bytes(range(32))
q41 = struct.pack("<HH", 0x3800, 0xBC00) + bytes(range(16))
write("gguf", "tokenizer_and_tensors", gguf(
    [("general.architecture", (8, gguf_string("llama"))), ("general.alignment", (4, struct.pack("<I", 32))),
     ("tokenizer.ggml.model", (8, gguf_string("gpt2"))), ("tokenizer.ggml.tokens", (9, string_array(tokens))),
     ("tokenizer.ggml.merges", (9, string_array(merges))), ("tokenizer.ggml.token_type", (9, int_array(types))),
     ("tokenizer.ggml.eos_token_id", (4, struct.pack("<I", 0))), ("rope.freq", (6, struct.pack("<f", 1e4))),
     ("flag", (7, b"\1")), ("big", (12, struct.pack("<d", 2.5)))],
    [("f32", [4, 2], 0, struct.pack("<8f", *range(8))), ("f16", [2], 1, struct.pack("<2H", 0x3C00, 0x4000)),
     ("q8", [32], 8, q8), ("q41", [32], 3, q41)]))

for text in ["hello world", "Hello, world! 123 <|im_end|>\n", "  spaces\t\ttabs\r\n", "caf\u00e9 \u65e5\u672c 'll 're 9999",
             "\x00\x01\xff\xfe raw bytes"]:
    write("tokenizer", "text_%d" % len(text), text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)
write("tokenizer", "invalid_utf8", b"\xc3\x28 \xe2\x82 \xf0\x9f\x98 hello")

# The structured harnesses read bytes through fuzz::input: random seeds of a few lengths, and for each
# mode of the trees harness (first byte 0, 1, 2), of the suffix harness (0: tree, 1: cache) and of the
# drafters harness (second byte: n-gram, suffix, chain, EAGLE-2) a seed that selects it.
for harness in ["trees", "builders", "verifiers", "primitives", "policy", "views", "sizes", "suffix", "drafters", "grammar",
                "distributions"]:
    for i, n in enumerate([16, 64, 256, 1024]):
        data = bytes(rng.randrange(256) for _ in range(n))
        if harness == "trees":
            data = bytes([i % 4]) + data[1:]
        if harness == "suffix":
            data = bytes([i % 2]) + data[1:]
        if harness == "drafters":
            data = data[:1] + bytes([i % 4]) + data[2:]
        write(harness, "random_%d" % i, data)

# Nesting past the reader's depth limit (64): what a recursive reader without one overflowed its stack
# on. The mutations lengthen it (scripts/fuzz.sh runs this harness with 64 KiB inputs).
deep = b"[" * 200 + b"]" * 200
write("safetensors", "deep_nesting", struct.pack("<Q", len(b'{"a":' + deep + b"}")) + b'{"a":' + deep + b"}")
