BEGIN;

-- Running upgrade harel_sa_0008 -> harel_sa_0009

CREATE TABLE IF NOT EXISTS jobs_transport_controls (
    target TEXT NOT NULL,
    paused_at REAL,
    backoff_until REAL,
    PRIMARY KEY (target)
);

UPDATE jobs_transport_alembic_version SET version_num='harel_sa_0009' WHERE jobs_transport_alembic_version.version_num = 'harel_sa_0008';

COMMIT;

