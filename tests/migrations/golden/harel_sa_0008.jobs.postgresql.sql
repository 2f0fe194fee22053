BEGIN;

-- Running upgrade harel_sa_0007 -> harel_sa_0008

COMMIT;

SET lock_timeout = '1s';

SET statement_timeout = '15min';

CREATE TABLE IF NOT EXISTS jobs_transport_periodic (
    name TEXT NOT NULL,
    tick_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (name)
);

RESET lock_timeout;

RESET statement_timeout;

BEGIN;

UPDATE jobs_transport_alembic_version SET version_num='harel_sa_0008' WHERE jobs_transport_alembic_version.version_num = 'harel_sa_0007';

COMMIT;

