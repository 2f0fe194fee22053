BEGIN;

-- Running upgrade harel_sa_0004 -> harel_sa_0005

ALTER TABLE jobs_transport_messages ADD COLUMN IF NOT EXISTS enqueued_at DOUBLE PRECISION;

DROP INDEX IF EXISTS jobs_transport_groups_by_routing_key;

CREATE INDEX IF NOT EXISTS jobs_transport_groups_by_routing_key ON jobs_transport_groups (routing_key, last_claimed_at) WHERE routing_key IS NOT NULL;

UPDATE jobs_transport_alembic_version SET version_num='harel_sa_0005' WHERE jobs_transport_alembic_version.version_num = 'harel_sa_0004';

COMMIT;

