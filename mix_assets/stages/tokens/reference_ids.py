"""HF's reference ids of token_ids_match_reference's sampled documents, reused per document through the keyed store.

token_ids_match_reference (exactness.py) encodes each source's seeded sample with HF `tokenizers`. A document's
reference ids are a pure function of its text, the tokenizer file and the encoding code (this module, what it
imports, backends.HFEncoder among it, and the `tokenizers` version), so each source's sample is filed in the
object store (core/objects.py): a keyed record `keyed/token_ids_reference/<key>.json` naming one Parquet blob
(text_key: blake2b-128 of the UTF-8 text, ids: list<uint32>, in sample order), under

    key = artifact_key("token_ids_reference", CODE, {"tokenizer": sha256 of the tokenizer file, "source": name,
                                                     "texts": sha256 of the sample's text keys in order})

A source whose sample has a record is read from its blob. Its texts need not even be read when the sample is
the same doc ids of the same documents file: a second keyed record `keyed/token_ids_reference_by_file/<key>.json`
names the same blob under

    key = artifact_key("token_ids_reference_by_file", CODE, {"tokenizer", "source", "file": sha256 of the documents
                       file the texts are read from, "doc_ids": sha256 of the sampled doc ids in order,
                       "reader": the code reading the texts (exactness.py's version)})

(a file's bytes and the reading code fix the text of each doc id, so the same texts, so the same ids). Otherwise each sampled text is looked up by its text
key among the records of the same code, tokenizer and source (newest first, their input keys say which), only
the texts none holds are encoded, and the sample is filed under its key. So a rebuild after new documents
encodes the new sampled documents only. The sample, the comparison and the check's result are exactness.py's;
only where HF's ids come from changes. A blob that does not hash to its name is never read (encoded instead).
gc (mix_assets/gc.py) collects these records like any keyed record nothing names: by age.
"""

from __future__ import annotations

import hashlib
import json
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tokenizers

from mix_assets.core import imports, keys, layout, objects, tables

ASSET = "token_ids_reference"
BY_FILE = "token_ids_reference_by_file"
WORK = layout.TOKEN_IDS_REFERENCE  # the working file a sample is filed from (then a blob)
SCHEMA = pa.schema([("text_key", pa.binary(16)), ("ids", pa.list_(pa.uint32()))])
CODE = f"{imports.source_version(__name__)[:16]}+tokenizers-{tokenizers.__version__}"
ENCODE_BATCH = 500


def text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


class ReferenceIds:
    """HF ids of sampled texts: from the keyed store where a record of this code and tokenizer holds them,
    else from `encoder` (backends.HFEncoder); counts what was reused and encoded."""

    def __init__(self, storage, tokenizer_sha256: str, encoder, run_id: str = "?"):
        self.storage, self.tokenizer, self.encoder, self.run_id = storage, tokenizer_sha256, encoder, run_id
        self.reused = 0
        self.encoded = 0
        self._counting = threading.Lock()  # by_file runs on exactness' reader thread, arrays on its encoder's

    def key(self, source: str, tkeys: list[bytes]) -> str:
        return keys.artifact_key(ASSET, CODE, self._inputs(source, tkeys))

    def _inputs(self, source: str, tkeys: list[bytes]) -> dict:
        return {"tokenizer": self.tokenizer, "source": source, "texts": hashlib.sha256(b"".join(tkeys)).hexdigest()}

    def _blob(self, rec: dict) -> pa.Table | None:
        """The table a record names, None when its blob is missing or changed (then not trusted)."""
        (sha,) = rec["outputs"].values()
        if objects.blob_problem(self.storage, sha):
            self.storage.delete(objects.object_key(sha))  # a changed blob goes; filing the sample again restores it
            return None
        return pq.read_table(self.storage.source(objects.object_key(sha)))

    def _records(self, source: str) -> list[dict]:
        """The records of this code, tokenizer and source, newest first."""
        out = []
        for k in self.storage.list(f"{objects.KEYED}/{ASSET}"):
            if not k.endswith(".json"):
                continue
            try:
                rec = json.loads(self.storage.read_text(k))
            except (ValueError, FileNotFoundError):
                continue
            ik = rec.get("input_keys") or {}
            if rec.get("code_version") == CODE and ik.get("tokenizer") == self.tokenizer and ik.get("source") == source:
                out.append(rec)
        return sorted(out, key=lambda r: (r.get("created") or "", r.get("key") or ""), reverse=True)

    def ids(self, source: str, texts: list[str]) -> list[list[int]]:
        """HF's ids of each of `texts` (a source's sample, in order)."""
        return [a.tolist() for a in self.arrays(source, texts)]

    def arrays(self, source: str, texts: list[str]) -> list[np.ndarray]:
        """`ids` as uint32 arrays (views into the stored blob where reused: no Python int per token)."""
        tkeys = [text_key(t) for t in texts]
        key = self.key(source, tkeys)
        rec = objects.read_keyed(self.storage, ASSET, key)
        got: dict[bytes, np.ndarray] = {}
        wanted = set(tkeys)
        for r in ([rec] if rec is not None else self._records(source)):
            t = self._blob(r)
            if t is None:
                continue
            col = t.column("ids").combine_chunks()
            values = col.values.to_numpy(zero_copy_only=False)
            offsets = col.offsets.to_numpy()
            for i, k in enumerate(t.column("text_key").to_pylist()):
                if k in wanted and k not in got:
                    got[k] = values[offsets[i]:offsets[i + 1]]
            if len(got) == len(wanted):
                break
        todo = list(dict.fromkeys(k for k in tkeys if k not in got))
        if todo:
            text_of = dict(zip(tkeys, texts))
            for lo in range(0, len(todo), ENCODE_BATCH):
                batch = todo[lo:lo + ENCODE_BATCH]
                for k, v in zip(batch, self.encoder.encode([text_of[x] for x in batch])):
                    got[k] = np.asarray(v, np.uint32)
        fresh = set(todo)
        n = sum(k in fresh for k in tkeys)
        with self._counting:
            self.encoded, self.reused = self.encoded + n, self.reused + len(tkeys) - n
        out = [got[k] for k in tkeys]
        if rec is None or todo:
            self._file(source, key, tkeys, out)
        return out

    def _by_file_inputs(self, source: str, file_sha256: str, doc_ids: list[str], reader: str) -> dict:
        return {"tokenizer": self.tokenizer, "source": source, "file": file_sha256, "reader": reader,
                "doc_ids": hashlib.sha256("\n".join(doc_ids).encode("utf-8")).hexdigest()}

    def by_file(self, source: str, file_sha256: str, doc_ids: list[str], reader: str) -> list[np.ndarray] | None:
        """`arrays` of the texts of `doc_ids` in the documents file whose bytes hash to `file_sha256`, as the code
        `reader` reads them, when a sample of exactly these doc ids of that file was filed; else None (nothing read)."""
        inputs = self._by_file_inputs(source, file_sha256, doc_ids, reader)
        rec = objects.read_keyed(self.storage, BY_FILE, keys.artifact_key(BY_FILE, CODE, inputs))
        t = None if rec is None else self._blob(rec)
        if t is None or len(t) != len(doc_ids):
            return None
        col = t.column("ids").combine_chunks()
        values, offsets = col.values.to_numpy(zero_copy_only=False), col.offsets.to_numpy()
        with self._counting:
            self.reused += len(doc_ids)
        return [values[offsets[i]:offsets[i + 1]] for i in range(len(doc_ids))]

    def file_by_file(self, source: str, file_sha256: str, doc_ids: list[str], reader: str, texts: list[str]) -> None:
        """Name the blob of the sample of `texts` (just filed or read by `arrays`) under the file's key too."""
        rec = objects.read_keyed(self.storage, ASSET, self.key(source, [text_key(t) for t in texts]))
        if rec is None:
            return
        inputs = self._by_file_inputs(source, file_sha256, doc_ids, reader)
        objects.write_keyed(self.storage, BY_FILE, keys.artifact_key(BY_FILE, CODE, inputs), rec["outputs"],
                            input_keys=inputs, code_version=CODE, run_id=self.run_id, dagster=None)

    def _file(self, source: str, key: str, tkeys: list[bytes], ids: list[np.ndarray]) -> None:
        path = WORK.format(source=source)
        offsets = np.zeros(len(ids) + 1, np.int32)
        np.cumsum([len(a) for a in ids], out=offsets[1:])
        values = np.concatenate(ids).astype(np.uint32, copy=False) if ids else np.zeros(0, np.uint32)
        col = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.uint32()))
        tables.write_parquet(self.storage, path, pa.table({"text_key": tkeys, "ids": col}, schema=SCHEMA))
        objects.stash(self.storage, ASSET, key, {path: self.storage.sha256(path)},
                      input_keys=self._inputs(source, tkeys), code_version=CODE, run_id=self.run_id, dagster=None)
