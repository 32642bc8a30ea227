"""The results DB's schema changes, as Alembic revisions (versions/), applied by `kgen.store.db.open_db` when a
command that writes opens a DB of an older schema.

Adding a change: a new file in versions/ whose `down_revision` is the latest one, numbered after it
(revision "0004" in 0004_what_it_does.py), that also sets `kgen_meta.schema_version` to its number;
then the model in kgen/store/db.py and `SCHEMA_VERSION` there. tests/test_db_migrations.py checks that the
migrated schema matches the models on SQLite and PostgreSQL, and that an old DB keeps its rows.

Migrations go forward only. kgen_meta's schema_version is what kgens before Alembic checked, so an older
kgen refuses a DB that a newer one has upgraded instead of misreading it.
"""
