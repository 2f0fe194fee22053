BEGIN;

-- Running upgrade harel_sa_0005 -> harel_sa_0006

COMMIT;

SET lock_timeout = '1s';

SET statement_timeout = '15min';

CREATE INDEX CONCURRENTLY IF NOT EXISTS harel_transport_groups_by_floor1 ON harel_transport_groups (last_claimed_at, arrival) WHERE priority >= 1;

CREATE INDEX CONCURRENTLY IF NOT EXISTS harel_transport_groups_by_floor2 ON harel_transport_groups (last_claimed_at, arrival) WHERE priority >= 2;

CREATE INDEX CONCURRENTLY IF NOT EXISTS harel_transport_groups_by_floor3 ON harel_transport_groups (last_claimed_at, arrival) WHERE priority >= 3;

CREATE INDEX CONCURRENTLY IF NOT EXISTS harel_transport_groups_by_floor4 ON harel_transport_groups (last_claimed_at, arrival) WHERE priority >= 4;

DROP INDEX CONCURRENTLY IF EXISTS harel_transport_groups_by_priority;

CREATE INDEX CONCURRENTLY IF NOT EXISTS harel_transport_groups_by_key_next ON harel_transport_groups (routing_key, last_claimed_at, arrival) WHERE routing_key IS NOT NULL;

DROP INDEX CONCURRENTLY IF EXISTS harel_transport_groups_by_routing_key;

ALTER INDEX IF EXISTS harel_transport_groups_by_key_next RENAME TO harel_transport_groups_by_routing_key;

RESET lock_timeout;

RESET statement_timeout;

BEGIN;

UPDATE harel_transport_alembic_version SET version_num='harel_sa_0006' WHERE harel_transport_alembic_version.version_num = 'harel_sa_0005';

COMMIT;

