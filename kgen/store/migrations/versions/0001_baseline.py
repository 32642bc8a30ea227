"""Baseline: the schema kgen wrote before it used Alembic (schema_version 1 in kgen_meta).

A DB made then is stamped with this revision, not migrated by it; on an empty DB it creates the tables.
Frozen: it spells out the tables as they were, and never imports kgen's models.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    meta = op.create_table(
        "kgen_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("problem", sa.String(200), nullable=False, index=True),
        sa.Column("problem_path", sa.Text(), nullable=False),
        sa.Column("problem_hash", sa.String(32), nullable=False),
        sa.Column("size", sa.String(16), nullable=False),
        sa.Column("proposer", sa.String(32), nullable=False),
        sa.Column("model", sa.String(200)),
        sa.Column("language", sa.String(16), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("rounds_planned", sa.Integer(), nullable=False),
        sa.Column("rounds_done", sa.Integer(), nullable=False),
        sa.Column("candidates_per_round", sa.Integer(), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("device", sa.String(200)),
        sa.Column("kgen_version", sa.String(32)),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime()),
    )
    op.create_table(
        "baselines",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("problem", sa.String(200), nullable=False),
        sa.Column("problem_hash", sa.String(32), nullable=False),
        sa.Column("size", sa.String(16), nullable=False),
        sa.Column("device", sa.String(200), nullable=False),
        sa.Column("torch_version", sa.String(64), nullable=False),
        sa.Column("triton_version", sa.String(64), nullable=False),
        sa.Column("eager_ms", sa.Float()),
        sa.Column("compile_ms", sa.Float()),
        sa.Column("compile_max_autotune_ms", sa.Float()),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("problem_hash", "size", "device", "torch_version", "triton_version"),
    )
    op.create_table(
        "llm_calls",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id"), index=True),
        sa.Column("round", sa.Integer()),
        sa.Column("proposer", sa.String(32), nullable=False),
        sa.Column("model", sa.String(200)),
        sa.Column("base_url", sa.Text()),
        sa.Column("template", sa.String(64)),
        sa.Column("prompt", sa.JSON()),
        sa.Column("response", sa.Text()),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("error", sa.Text()),
        sa.Column("tokens_in", sa.Integer()),
        sa.Column("tokens_out", sa.Integer()),
        sa.Column("latency_s", sa.Float()),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "candidates",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id"), index=True),
        sa.Column("round", sa.Integer()),
        sa.Column("problem", sa.String(200), nullable=False, index=True),
        sa.Column("problem_hash", sa.String(32)),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("source_hash", sa.String(64), nullable=False, index=True),
        sa.Column("language", sa.String(16), nullable=False),
        sa.Column("parent_ids", sa.JSON(), nullable=False),
        sa.Column("proposer", sa.String(32), nullable=False),
        sa.Column("model", sa.String(200)),
        sa.Column("idea", sa.Text()),
        sa.Column("origin", sa.Text()),
        sa.Column("llm_call_id", sa.Integer(), sa.ForeignKey("llm_calls.id")),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "evaluations",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("candidate_id", sa.Integer(), sa.ForeignKey("candidates.id"), nullable=False, index=True),
        sa.Column("outcome", sa.String(32), nullable=False, index=True),
        sa.Column("message", sa.Text()),
        sa.Column("language", sa.String(16)),
        sa.Column("device", sa.String(200), nullable=False),
        sa.Column("size", sa.String(16), nullable=False),
        sa.Column("max_abs_err", sa.Float()),
        sa.Column("max_rel_err", sa.Float()),
        sa.Column("norm_rel_err", sa.Float()),
        sa.Column("atol", sa.Float()),
        sa.Column("rtol", sa.Float()),
        sa.Column("runtime_ms", sa.Float()),
        sa.Column("eager_ms", sa.Float()),
        sa.Column("compile_ms", sa.Float()),
        sa.Column("speedup_eager", sa.Float()),
        sa.Column("speedup_compile", sa.Float()),
        sa.Column("roofline_pct", sa.Float()),
        sa.Column("torch_ops", sa.JSON(), nullable=False),
        sa.Column("compile_s", sa.Float()),
        sa.Column("eval_s", sa.Float()),
        sa.Column("torch_version", sa.String(64)),
        sa.Column("triton_version", sa.String(64)),
        sa.Column("cuda_version", sa.String(64)),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.bulk_insert(meta, [{"key": "schema_version", "value": "1"}])
