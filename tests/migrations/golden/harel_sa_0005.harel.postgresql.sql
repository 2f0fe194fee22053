BEGIN;

-- Running upgrade harel_sa_0004 -> harel_sa_0005

COMMIT;

SET lock_timeout = '1s';

SET statement_timeout = '15min';

ALTER TABLE harel_transport_messages ADD COLUMN IF NOT EXISTS enqueued_at DOUBLE PRECISION;

CREATE INDEX CONCURRENTLY IF NOT EXISTS harel_transport_groups_by_key_next ON harel_transport_groups (routing_key, last_claimed_at) WHERE routing_key IS NOT NULL;

DROP INDEX CONCURRENTLY IF EXISTS harel_transport_groups_by_routing_key;

ALTER INDEX IF EXISTS harel_transport_groups_by_key_next RENAME TO harel_transport_groups_by_routing_key;

RESET lock_timeout;

RESET statement_timeout;

BEGIN;

UPDATE harel_transport_alembic_version SET version_num='harel_sa_0005' WHERE harel_transport_alembic_version.version_num = 'harel_sa_0004';

COMMIT;

