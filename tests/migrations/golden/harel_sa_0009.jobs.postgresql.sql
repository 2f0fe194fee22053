BEGIN;

-- Running upgrade harel_sa_0008 -> harel_sa_0009

COMMIT;

SET lock_timeout = '1s';

SET statement_timeout = '15min';

CREATE TABLE IF NOT EXISTS jobs_transport_controls (
    target TEXT NOT NULL,
    paused_at DOUBLE PRECISION,
    backoff_until DOUBLE PRECISION,
    PRIMARY KEY (target)
);

RESET lock_timeout;

RESET statement_timeout;

BEGIN;

UPDATE jobs_transport_alembic_version SET version_num='harel_sa_0009' WHERE jobs_transport_alembic_version.version_num = 'harel_sa_0008';

COMMIT;

