"""selection wording: stored persona texts name the selection split as the API does

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# The machine-written texts that quote the deciding F1: a persona's status reason, an
# iteration's note and its convergence status message. The first release wrote "holdout F1"
# (its split's name), 0010-0013 "held-out F1"; migration 0010 renamed the split to
# "selection" but left these texts alone, so an old persona still read "holdout F1".
_TEXTS = (
    ("personas", "status_reason"),
    ("persona_iterations", "note"),
)
_OLD = ("holdout F1", "held-out F1")
_NEW = "selection F1"
_DOWN = "held-out F1"  # 0013's wording (which of the two old ones a text had is not kept)


def _rewrite(expr: str, olds: tuple[str, ...], new: str) -> str:
    for old in olds:
        expr = f"replace({expr}, '{old}', '{new}')"
    return expr


def _run(olds: tuple[str, ...], new: str) -> None:
    like = " OR ".join(f"{{col}} LIKE '%{old}%'" for old in olds)
    for table, col in _TEXTS:
        op.execute(
            f"UPDATE {table} SET {col} = {_rewrite(col, olds, new)} WHERE " + like.format(col=col)
        )
    message = "convergence->>'message'"
    op.execute(
        "UPDATE persona_iterations SET convergence = jsonb_set(convergence, '{message}', "
        f"to_jsonb({_rewrite(message, olds, new)})) WHERE jsonb_typeof(convergence) = 'object' "
        f"AND jsonb_typeof(convergence->'message') = 'string' AND ("
        + like.format(col=message)
        + ")"
    )


def upgrade() -> None:
    _run(_OLD, _NEW)


def downgrade() -> None:
    _run((_NEW,), _DOWN)
