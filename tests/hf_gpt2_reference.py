#!/usr/bin/python3
"""Reference GPT-2 forward over an exported Hugging Face folder.

Stands in for transformers' GPT2LMHeadModel.from_pretrained(dir), which
cannot be installed here: it checks that config.json holds what GPT2Config
needs and that model.safetensors holds exactly GPT2LMHeadModel's tensors
(HF names, Conv1D layouts, format "pt"), parses the file with its own small
safetensors reader (not ours, so the two check each other), and computes the
logits the way modeling_gpt2.py does: pre-LN blocks, Conv1D as x @ W + b,
causal softmax attention scaled by 1/sqrt(head_dim), gelu_new (the tanh
approximation), a final ln_f, and logits = h @ wte^T.

Usage: /usr/bin/python3 hf_gpt2_reference.py DIR --tokens 1,2,3 [--out FILE]
Prints the logits' shape and writes them, float32 [T, vocab], to FILE as a
safetensors file with one tensor "logits". Needs torch (1.13 is enough).
"""

import argparse
import json
import math
import os
import struct
import sys

import torch

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
ACTIVATIONS = {"gelu_new", "gelu_pytorch_tanh"}


class ReferenceError(Exception):
    pass


def require(condition, message):
    if not condition:
        raise ReferenceError(message)


def read_safetensors(path):
    """Returns ({name: tensor}, metadata), checking the layout the spec demands."""
    with open(path, "rb") as f:
        data = f.read()
    require(len(data) >= 8, f"{path}: shorter than the header length")
    (header_len,) = struct.unpack("<Q", data[:8])
    require(8 + header_len <= len(data), f"{path}: header length past the end")
    require((8 + header_len) % 8 == 0, f"{path}: data buffer is not 8-byte aligned")
    header = json.loads(data[8:8 + header_len].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    require(all(isinstance(v, str) for v in metadata.values()), f"{path}: metadata values must be strings")
    buffer = bytearray(data[8 + header_len:])
    tensors = {}
    expected_begin = 0
    for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"]):
        begin, end = info["data_offsets"]
        require(begin == expected_begin, f"{path}: tensor {name} does not start where the previous ended")
        dtype = DTYPES[info["dtype"]]
        count = math.prod(info["shape"])
        require(end - begin == count * torch.empty((), dtype=dtype).element_size(), f"{path}: {name} size mismatch")
        flat = torch.frombuffer(buffer, dtype=dtype, count=count, offset=begin) if count else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(info["shape"])
        expected_begin = end
    require(expected_begin == len(buffer), f"{path}: tensors do not cover the data buffer")
    return tensors, metadata


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata} if metadata else {}
    offset = 0
    blobs = []
    for name in sorted(tensors):
        blob = tensors[name].contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def check_config(config):
    """What GPT2Config and GPT2LMHeadModel.from_pretrained rely on."""
    require(config.get("model_type") == "gpt2", "config.json: model_type must be 'gpt2'")
    require("GPT2LMHeadModel" in config.get("architectures", []), "config.json: architectures lacks GPT2LMHeadModel")
    for key in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
        value = config.get(key)
        require(isinstance(value, int) and not isinstance(value, bool) and value > 0, f"config.json: bad {key}")
    require(config["n_embd"] % config["n_head"] == 0, "config.json: n_embd not divisible by n_head")
    require(config.get("n_ctx", config["n_positions"]) == config["n_positions"], "config.json: n_ctx != n_positions")
    require(config.get("n_inner") in (None, 4 * config["n_embd"]), "config.json: n_inner")
    require(config.get("activation_function") in ACTIVATIONS, "config.json: activation_function")
    require(isinstance(config.get("layer_norm_epsilon"), float), "config.json: layer_norm_epsilon")
    require(isinstance(config.get("initializer_range"), float), "config.json: initializer_range")
    for key in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
        require(isinstance(config.get(key), (int, float)) and 0 <= config[key] < 1, f"config.json: {key}")
    for key in ("bos_token_id", "eos_token_id"):
        value = config.get(key)
        require(value is None or (isinstance(value, int) and 0 <= value < config["vocab_size"]), f"config.json: {key}")
    require(config.get("tie_word_embeddings") is True, "config.json: tie_word_embeddings must be true")
    require(config.get("torch_dtype") in ("float32", "float16", "bfloat16"), "config.json: torch_dtype")
    require(config.get("scale_attn_weights", True) is True, "config.json: scale_attn_weights")
    require(config.get("scale_attn_by_inverse_layer_idx", False) is False, "config.json: scale_attn_by_inverse_layer_idx")


def expected_shapes(config):
    """GPT2LMHeadModel's saved tensors (tied lm_head and mask buffers left out)."""
    d, shapes = config["n_embd"], {}
    shapes["transformer.wte.weight"] = [config["vocab_size"], d]
    shapes["transformer.wpe.weight"] = [config["n_positions"], d]
    for i in range(config["n_layer"]):
        p = f"transformer.h.{i}."
        shapes.update({
            p + "ln_1.weight": [d], p + "ln_1.bias": [d],
            p + "attn.c_attn.weight": [d, 3 * d], p + "attn.c_attn.bias": [3 * d],
            p + "attn.c_proj.weight": [d, d], p + "attn.c_proj.bias": [d],
            p + "ln_2.weight": [d], p + "ln_2.bias": [d],
            p + "mlp.c_fc.weight": [d, 4 * d], p + "mlp.c_fc.bias": [4 * d],
            p + "mlp.c_proj.weight": [4 * d, d], p + "mlp.c_proj.bias": [d],
        })
    shapes["transformer.ln_f.weight"] = [d]
    shapes["transformer.ln_f.bias"] = [d]
    return shapes


def load(folder):
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    check_config(config)
    tensors, metadata = read_safetensors(os.path.join(folder, "model.safetensors"))
    require(metadata.get("format") == "pt", "model.safetensors: transformers needs metadata format 'pt'")
    shapes = expected_shapes(config)
    require(set(tensors) == set(shapes), f"model.safetensors: names differ: {sorted(set(tensors) ^ set(shapes))}")
    for name, shape in shapes.items():
        require(list(tensors[name].shape) == shape, f"{name}: shape {list(tensors[name].shape)}, expected {shape}")
        require(tensors[name].dtype == torch.float32, f"{name}: not F32")
    return config, tensors


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def conv1d(x, weight, bias):
    # transformers' Conv1D: addmm over the flattened rows, weight [in, out].
    out = torch.addmm(bias, x.reshape(-1, x.size(-1)), weight)
    return out.reshape(*x.shape[:-1], weight.size(-1))


def forward(config, w, tokens):
    d, n_head, eps = config["n_embd"], config["n_head"], config["layer_norm_epsilon"]
    ids = torch.tensor([tokens], dtype=torch.long)
    require(ids.size(1) <= config["n_positions"], "more tokens than n_positions")
    require(int(ids.max()) < config["vocab_size"] and int(ids.min()) >= 0, "token id out of the vocabulary")
    t = ids.size(1)
    h = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][torch.arange(t)].unsqueeze(0)
    causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for i in range(config["n_layer"]):
        p = f"transformer.h.{i}."
        a = torch.nn.functional.layer_norm(h, (d,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        q, k, v = conv1d(a, w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"]).split(d, dim=2)
        q, k, v = (x.reshape(1, t, n_head, d // n_head).permute(0, 2, 1, 3) for x in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5, dtype=q.dtype)
        scores = torch.where(causal, scores, torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype))
        attended = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3).reshape(1, t, d)
        h = h + conv1d(attended, w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"])
        m = torch.nn.functional.layer_norm(h, (d,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        m = gelu_new(conv1d(m, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"]))
        h = h + conv1d(m, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])
    h = torch.nn.functional.layer_norm(h, (d,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    return torch.nn.functional.linear(h, w["transformer.wte.weight"])[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--tokens", required=True, help="comma-separated token ids")
    parser.add_argument("--out", help="write the logits here (safetensors, tensor 'logits')")
    args = parser.parse_args()
    try:
        config, weights = load(args.folder)
        with torch.no_grad():
            logits = forward(config, weights, [int(x) for x in args.tokens.split(",")])
    except (ReferenceError, OSError, ValueError, KeyError) as e:
        print(f"hf_gpt2_reference: {e}", file=sys.stderr)
        return 1
    if args.out:
        write_safetensors(args.out, {"logits": logits}, {"source": "hf_gpt2_reference.py"})
    print(f"logits {list(logits.shape)} mean {logits.mean().item():.6f} std {logits.std().item():.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
