BEGIN;

-- Running upgrade harel_sa_0005 -> harel_sa_0006

CREATE INDEX IF NOT EXISTS jobs_transport_groups_by_floor1 ON jobs_transport_groups (last_claimed_at, arrival) WHERE priority >= 1;

CREATE INDEX IF NOT EXISTS jobs_transport_groups_by_floor2 ON jobs_transport_groups (last_claimed_at, arrival) WHERE priority >= 2;

CREATE INDEX IF NOT EXISTS jobs_transport_groups_by_floor3 ON jobs_transport_groups (last_claimed_at, arrival) WHERE priority >= 3;

CREATE INDEX IF NOT EXISTS jobs_transport_groups_by_floor4 ON jobs_transport_groups (last_claimed_at, arrival) WHERE priority >= 4;

DROP INDEX IF EXISTS jobs_transport_groups_by_priority;

DROP INDEX IF EXISTS jobs_transport_groups_by_routing_key;

CREATE INDEX IF NOT EXISTS jobs_transport_groups_by_routing_key ON jobs_transport_groups (routing_key, last_claimed_at, arrival) WHERE routing_key IS NOT NULL;

UPDATE jobs_transport_alembic_version SET version_num='harel_sa_0006' WHERE jobs_transport_alembic_version.version_num = 'harel_sa_0005';

COMMIT;

