BEGIN;

-- Running upgrade harel_sa_0007 -> harel_sa_0008

CREATE TABLE IF NOT EXISTS jobs_transport_periodic (
    name TEXT NOT NULL,
    tick_at REAL NOT NULL,
    PRIMARY KEY (name)
);

UPDATE jobs_transport_alembic_version SET version_num='harel_sa_0008' WHERE jobs_transport_alembic_version.version_num = 'harel_sa_0007';

COMMIT;

