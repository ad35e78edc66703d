"""The trajectory store: SQLite (WAL) plus content-addressed screenshot blobs.

Writers (:class:`Store`, :class:`EpisodeWriter`) are crash-safe and may run in
several processes at once; readers (:class:`StoreReader`) are read-only and see
only completed or aborted episodes. Exports to Parquet and Hugging Face
``datasets`` live in :mod:`guiagent.store.export`. See ``docs/store.md``.
"""

from guiagent.store.blobs import BlobStore, blob_hash, check_hash, image_extension
from guiagent.store.errors import (
    BlobDamaged, BlobNotFound, EpisodeClosed, EpisodeNotFound, InvalidBlobRef, InvalidCursor, RunNotFound, StoreError,
)
from guiagent.store.export import export_hf_dataset, export_parquet
from guiagent.store.reader import StoreReader
from guiagent.store.records import (
    SORT_KEYS, SUCCESS_THRESHOLD, EpisodeDetail, EpisodeFilter, EpisodePage, EpisodeSummary,
    JudgementRecord, MetricPoint, RunInfo, StepCredit, StepRecord, TaskStats,
)
from guiagent.store.writer import EpisodeWriter, Store

__all__ = [
    "Store", "EpisodeWriter", "StoreReader", "EpisodeFilter", "EpisodePage", "RunInfo", "EpisodeSummary",
    "EpisodeDetail", "StepRecord", "StepCredit", "JudgementRecord", "MetricPoint", "TaskStats", "SORT_KEYS",
    "SUCCESS_THRESHOLD", "StoreError", "InvalidBlobRef", "BlobNotFound", "BlobDamaged", "EpisodeNotFound", "RunNotFound",
    "EpisodeClosed", "InvalidCursor", "BlobStore", "blob_hash", "check_hash", "image_extension",
    "export_parquet", "export_hf_dataset",
]
