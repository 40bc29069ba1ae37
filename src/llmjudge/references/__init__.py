"""The references domain's public surface: what other domains may import."""

from llmjudge.infra.exports import public

__all__, __getattr__ = public(
    __name__,
    {
        "llmjudge.references.agreement_report": (
            "labels_of_pairs",
            "session_agreement",
        ),
        "llmjudge.references.models": ("ReferenceLabel",),
        "llmjudge.references.schemas": ("StatedConfidenceOut", "FigureOut"),
        "llmjudge.references.service": (
            "LabelRow",
            "session_annotators",
            "session_label_sources",
            "store_labels",
            "thread_pillars",
        ),
    },
)
