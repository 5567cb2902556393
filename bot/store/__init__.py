"""The incident store (one SQLite file, WAL, migrations): what the bot remembers between messages."""

from .db import StoreError, open_db
from .models import DiagnosisRecord, EvidenceRecord, Feedback, Incident, NewEvidence
from .store import Store

__all__ = ["DiagnosisRecord", "EvidenceRecord", "Feedback", "Incident", "NewEvidence", "Store", "StoreError",
           "open_db"]
