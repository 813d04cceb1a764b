"""Whether a result was measured by a search that saved it here (verified) or came in through an
import or a merge.

Revision ID: v4_verified
Revises: v3_leases
"""
from alembic import op
import sqlalchemy as sa

revision = "v4_verified"
down_revision = "v3_leases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Where a result recorded before v4 was measured is not known: it counts as not verified,
    # so the next `tunesearch tune` of its kernel measures it once more.
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("verified", sa.Boolean(), server_default=sa.false(),
                                   nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.drop_column("verified")
