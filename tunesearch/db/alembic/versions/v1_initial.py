"""The first schema: devices, kernels, and the best result per (kernel, device).

Revision ID: v1_initial
Revises:
"""
from alembic import op
import sqlalchemy as sa

revision = "v1_initial"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "devices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("backend", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.Column("first_seen", sa.DateTime(), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_devices"),
        sa.UniqueConstraint("key", name="uq_devices_key"),
    )
    op.create_table(
        "kernels",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("canonical", sa.Text(), nullable=False),
        sa.Column("ops", sa.Text(), nullable=False),
        sa.Column("shapes", sa.Text(), nullable=False),
        sa.Column("space_version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_kernels"),
        sa.UniqueConstraint("key", name="uq_kernels_key"),
    )
    op.create_table(
        "results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kernel_id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("config", sa.Text(), nullable=False),
        sa.Column("time_s", sa.Float(), nullable=False),
        sa.Column("gflops", sa.Float(), nullable=False),
        sa.Column("gbps", sa.Float(), nullable=False),
        sa.Column("default_time_s", sa.Float(), nullable=False),
        sa.Column("speedup", sa.Float(), nullable=False),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("sampler", sa.String(64), nullable=False),
        sa.Column("tunesearch_version", sa.String(64), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_results"),
        sa.UniqueConstraint("kernel_id", "device_id", name="uq_results_kernel_id_device_id"),
        sa.ForeignKeyConstraint(["kernel_id"], ["kernels.id"], ondelete="CASCADE",
                                name="fk_results_kernel_id_kernels"),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], ondelete="CASCADE",
                                name="fk_results_device_id_devices"),
    )
    op.create_index("ix_results_device_id", "results", ["device_id"])


def downgrade() -> None:
    op.drop_index("ix_results_device_id", table_name="results")
    op.drop_table("results")
    op.drop_table("kernels")
    op.drop_table("devices")
