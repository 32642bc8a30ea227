"""Rounds are numbered from 1 in the DB, as kgen shows them: candidates and LLM calls stored before this
(from 0) move up by one.

Revision ID: 0002
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("UPDATE candidates SET round = round + 1 WHERE round IS NOT NULL")
    op.execute("UPDATE llm_calls SET round = round + 1 WHERE round IS NOT NULL")
    op.execute("UPDATE kgen_meta SET value = '2' WHERE \"key\" = 'schema_version'")
