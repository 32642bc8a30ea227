"""The results DB and what is read from it: the schema and its connections (db.py, migrations/), the
writes and reads more than one stage needs (queries.py), the history a proposer sees, the cost ledger,
the leaderboard, the promotion rule, and the baselines cached per problem and device. Imports the
layers below it (core, problems, harness, judge), never the proposers, the search or the CLI
(tests/test_layers.py)."""
