"""one vote table: every judge answer is a comparison_votes row (a single judge is member 0)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A single-judge session's panel is SQL NULL or JSON null (as the ORM writes None).
    # A single judge's answers were stored on their comparison rows only; from now on each
    # is also its member-0 vote, as a panel member's is. The comparison rows keep their
    # columns (the aggregate every reader uses), so nothing is lost and nothing is moved.
    op.execute(
        """
        INSERT INTO comparison_votes (comparison_id, session_id, member, model_id, judge,
            status, winner, strength, confidence, scores_a, scores_b, reasoning,
            raw_response, input_tokens, output_tokens, cost_usd, latency_s, cache_hit, error)
        SELECT c.id, c.session_id, 0, s.judge_model_id,
               left(COALESCE(s.options->>'judge_label', ''), 200),
               CASE WHEN c.status = 'completed' AND c.winner IS NOT NULL
                    THEN 'voted' ELSE 'missing' END,
               c.winner, c.strength, c.confidence, c.scores_a, c.scores_b, c.reasoning,
               c.raw_response, c.input_tokens, c.output_tokens, c.cost_usd, c.latency_s,
               c.cache_hit,
               CASE WHEN c.status = 'completed' AND c.winner IS NOT NULL
                    THEN left('unparsed, a tie: ' || c.parse_error, 2000)
                    ELSE COALESCE(c.parse_error, c.error) END
        FROM comparisons c JOIN judge_sessions s ON s.id = c.session_id
        WHERE jsonb_typeof(s.panel) IS DISTINCT FROM 'object' AND c.votes_asked IS NULL
          AND c.status IN ('completed', 'failed')
          AND (c.status = 'completed' OR c.started_at IS NOT NULL
               OR c.raw_response IS NOT NULL OR c.parse_error IS NOT NULL)
        ON CONFLICT (comparison_id, member) DO NOTHING
        """
    )


def downgrade() -> None:
    # The comparison rows still hold every single-judge answer: its votes can go.
    op.execute(
        """
        DELETE FROM comparison_votes v USING judge_sessions s
        WHERE s.id = v.session_id AND jsonb_typeof(s.panel) IS DISTINCT FROM 'object'
        """
    )
