BEGIN;

-- Running upgrade harel_sa_0004 -> harel_sa_0005

COMMIT;

SET lock_timeout = '1s';

SET statement_timeout = '15min';

ALTER TABLE jobs_transport_messages ADD COLUMN IF NOT EXISTS enqueued_at DOUBLE PRECISION;

CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_transport_groups_by_key_next ON jobs_transport_groups (routing_key, last_claimed_at) WHERE routing_key IS NOT NULL;

DROP INDEX CONCURRENTLY IF EXISTS jobs_transport_groups_by_routing_key;

ALTER INDEX IF EXISTS jobs_transport_groups_by_key_next RENAME TO jobs_transport_groups_by_routing_key;

RESET lock_timeout;

RESET statement_timeout;

BEGIN;

UPDATE jobs_transport_alembic_version SET version_num='harel_sa_0005' WHERE jobs_transport_alembic_version.version_num = 'harel_sa_0004';

COMMIT;

