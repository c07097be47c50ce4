"""Issue 19, database-free: the Reembedded event, per-embedder vectors, and compressed
sealed payloads."""

from __future__ import annotations

import numpy as np
import pytest

from memfabric.adapters.crypto import COMPRESSED, _U32, pack_payload, unpack_payload
from memfabric.domain.errors import EmbedderChangedError, EventIntegrityError, NoteForgottenError
from memfabric.domain.note import Note, vector_for
from memfabric.domain.scope import Scope
from memfabric.projections import consolidation_index, recall_index


def _note(dim: int = 4, embedder_id: str = "old-4") -> Note:
    return Note.remember(
        scope=Scope(tenant_id="acme"), note_id="a" * 12, kind="fact", content="User likes tea", path=None,
        block=None, subject=None, t_ref=None, valid_from=None, valid_to=None, keywords=[], tags=[],
        source_entry_ids=[], context=None, links=[], supersedes=None, importance=0.5, consent=None,
        embedding=np.ones(dim, np.float32).tobytes(), embedder_id=embedder_id, dim=dim, token_count=3,
        cause="caller")


def test_reembedded_keeps_both_vectors_and_projections_pick_theirs() -> None:
    note = _note()
    new = np.arange(6, dtype=np.float32).tobytes()
    note.reembed(embedding=new, embedder_id="new-6", dim=6)
    assert vector_for(note, "new-6") == new and vector_for(note, "old-4") == note.embedding
    assert len(recall_index.row_for(note, "new-6", 6)[recall_index.COLUMNS.index("embedding")]) == 6  # type: ignore[index]
    assert recall_index.row_for(note, "new-6", 6)[recall_index.COLUMNS.index("embedder_id")] == "new-6"  # type: ignore[index]
    assert len(consolidation_index.row_for(note, "old-4", 4)[11]) == 4  # type: ignore[index]
    assert [type(e).__name__ for e in note.collect_events()] == ["Remembered", "Reembedded"]


def test_a_fold_drops_stale_vectors_and_a_missing_vector_of_another_dimension_is_named() -> None:
    note = _note()
    note.reembed(embedding=np.ones(6, np.float32).tobytes(), embedder_id="new-6", dim=6)
    note.fold(content="User loves tea", context=None, keywords=[], tags=[], source_entry_ids=[], links=[],
              embedding=np.ones(4, np.float32).tobytes(), embedder_id="old-4", token_count=3, importance=None,
              consent=None, t_ref=None, valid_from=None, valid_to=None, cause="fold")
    assert vector_for(note, "new-6") is None
    with pytest.raises(EmbedderChangedError, match="new-6"):
        recall_index.row_for(note, "new-6", 6)
    # same dimension, no vector of that embedder: a log from before the record keeps working
    assert recall_index.row_for(note, "other-4", 4) is not None


def test_forgotten_notes_cannot_be_reembedded_and_lose_their_vectors() -> None:
    note = _note()
    note.reembed(embedding=np.ones(6, np.float32).tobytes(), embedder_id="new-6", dim=6)
    note.forget(content_hmac=None, reason="user_request", requested_by="x")
    assert note.vectors == {} and note.embedding is None
    with pytest.raises(NoteForgottenError):
        note.reembed(embedding=b"\0" * 24, embedder_id="new-6", dim=6)


def test_payloads_compress_when_it_pays_and_old_payloads_read_as_before() -> None:
    sparse = np.zeros(384, np.float32)
    sparse[[3, 77, 300]] = 0.5
    text = b'{"content":"User likes tea"}'
    packed = pack_payload(text, sparse.tobytes())
    assert _U32.unpack_from(packed, 0)[0] & COMPRESSED and len(packed) < 300
    plain = _U32.pack(len(text)) + text + sparse.tobytes()
    assert unpack_payload(packed) == plain
    assert unpack_payload(plain) == plain                                   # an old, uncompressed payload
    dense = np.random.default_rng(1).standard_normal(8).astype(np.float32).tobytes()
    assert pack_payload(b"{}", dense) == _U32.pack(2) + b"{}" + dense         # too small to pay
    with pytest.raises(EventIntegrityError):
        unpack_payload(_U32.pack(COMPRESSED) + b"not zlib")
