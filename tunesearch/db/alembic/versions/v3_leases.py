"""Leases for tuning across machines: registered work per model, leases per kernel and device.

Revision ID: v3_leases
Revises: v2_trials_history
"""
from alembic import op
import sqlalchemy as sa

revision = "v3_leases"
down_revision = "v2_trials_history"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "work",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("kernel_key", sa.String(255), nullable=False),
        sa.Column("device_key", sa.String(255), nullable=False),
        sa.Column("kernel_name", sa.String(255), nullable=False),
        sa.Column("occurrences", sa.Integer(), nullable=False),
        sa.Column("registered", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_work"),
        sa.UniqueConstraint("model", "kernel_key", "device_key",
                            name="uq_work_model_kernel_key_device_key"),
    )
    op.create_table(
        "leases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kernel_key", sa.String(255), nullable=False),
        sa.Column("device_key", sa.String(255), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("kernel_name", sa.String(255), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("worker", sa.String(255), nullable=True),
        sa.Column("claimed_at", sa.DateTime(), nullable=True),
        sa.Column("heartbeat", sa.DateTime(), nullable=True),
        sa.Column("expires_at", sa.DateTime(), nullable=True),
        sa.Column("claims", sa.Integer(), nullable=False),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("budget", sa.Integer(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("updated", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_leases"),
        sa.UniqueConstraint("kernel_key", "device_key", "slot",
                            name="uq_leases_kernel_key_device_key_slot"),
    )
    op.create_index("ix_leases_device_key_state", "leases", ["device_key", "state"])
    op.create_table(
        "lease_claims",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("lease_id", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(255), nullable=False),
        sa.Column("claimed_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_lease_claims"),
        sa.ForeignKeyConstraint(["lease_id"], ["leases.id"], ondelete="CASCADE",
                                name="fk_lease_claims_lease_id_leases"),
    )
    op.create_index("ix_lease_claims_lease_id", "lease_claims", ["lease_id"])


def downgrade() -> None:
    op.drop_index("ix_lease_claims_lease_id", table_name="lease_claims")
    op.drop_table("lease_claims")
    op.drop_index("ix_leases_device_key_state", table_name="leases")
    op.drop_table("leases")
    op.drop_table("work")
