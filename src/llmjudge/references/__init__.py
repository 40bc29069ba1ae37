"""The references domain's public surface: what other domains may import."""

from llmjudge.references.agreement_report import session_agreement
from llmjudge.references.models import ReferenceLabel
from llmjudge.references.schemas import FigureOut
from llmjudge.references.service import LabelRow, session_annotators, store_labels

__all__ = [
    "FigureOut",
    "LabelRow",
    "ReferenceLabel",
    "session_agreement",
    "session_annotators",
    "store_labels",
]
