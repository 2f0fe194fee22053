BEGIN;

-- Running upgrade harel_sa_0002 -> harel_sa_0003

COMMIT;

SET lock_timeout = '1s';

SET statement_timeout = '15min';

ALTER TABLE harel_transport_messages ADD COLUMN IF NOT EXISTS deliveries BIGINT NOT NULL DEFAULT 0;

BEGIN;

CREATE TABLE IF NOT EXISTS harel_transport_dead (
    seq BIGINT NOT NULL,
    group_id TEXT NOT NULL,
    event TEXT NOT NULL,
    error TEXT NOT NULL,
    dead_at DOUBLE PRECISION NOT NULL,
    deliveries BIGINT NOT NULL,
    priority BIGINT DEFAULT 0 NOT NULL,
    routing_key TEXT,
    PRIMARY KEY (seq)
);

CREATE INDEX IF NOT EXISTS harel_transport_dead_by_group ON harel_transport_dead (group_id, seq);

COMMIT;

RESET lock_timeout;

RESET statement_timeout;

BEGIN;

UPDATE harel_transport_alembic_version SET version_num='harel_sa_0003' WHERE harel_transport_alembic_version.version_num = 'harel_sa_0002';

COMMIT;

