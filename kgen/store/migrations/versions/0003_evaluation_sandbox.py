"""evaluations.sandbox: the kind of sandbox the candidate ran in ("bwrap", "none", ...); empty for
evaluations stored before kgen recorded it.

Revision ID: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("evaluations", sa.Column("sandbox", sa.String(32)))
    op.execute("UPDATE kgen_meta SET value = '3' WHERE \"key\" = 'schema_version'")
