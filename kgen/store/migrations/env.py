"""Alembic's entry point. kgen runs the migrations itself (kgen.store.db.open_db), on a connection it has locked
against other kgen processes and begun a transaction on; it passes that connection in
`config.attributes["connection"]`, and commits the migrations together with that lock."""

from alembic import context

from kgen.store.db import Base

context.configure(connection=context.config.attributes["connection"], target_metadata=Base.metadata)
with context.begin_transaction():  # the caller's transaction: nothing is committed here
    context.run_migrations()
