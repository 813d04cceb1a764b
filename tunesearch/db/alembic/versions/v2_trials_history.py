"""Trial history for analysis and warm starts; spread and host on results.

Revision ID: v2_trials_history
Revises: v1_initial
"""
from alembic import op
import sqlalchemy as sa

revision = "v2_trials_history"
down_revision = "v1_initial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Results recorded before v2 keep a spread of 0 and an empty host: both were not measured.
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("spread", sa.Float(), server_default="0", nullable=False))
        batch.add_column(sa.Column("host", sa.String(255), server_default="", nullable=False))
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kernel_id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("config", sa.Text(), nullable=False),
        sa.Column("time_s", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_trials"),
        sa.ForeignKeyConstraint(["kernel_id"], ["kernels.id"], ondelete="CASCADE",
                                name="fk_trials_kernel_id_kernels"),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], ondelete="CASCADE",
                                name="fk_trials_device_id_devices"),
    )
    op.create_index("ix_trials_kernel_id_device_id", "trials", ["kernel_id", "device_id"])


def downgrade() -> None:
    op.drop_index("ix_trials_kernel_id_device_id", table_name="trials")
    op.drop_table("trials")
    with op.batch_alter_table("results") as batch:
        batch.drop_column("host")
        batch.drop_column("spread")
