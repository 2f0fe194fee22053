BEGIN;

-- Running upgrade harel_sa_0001 -> harel_sa_0002

COMMIT;

SET lock_timeout = '1s';

SET statement_timeout = '15min';

ALTER TABLE jobs_transport_groups ADD COLUMN IF NOT EXISTS routing_key TEXT;

CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_transport_groups_by_routing_key ON jobs_transport_groups (routing_key, last_claimed_at);

RESET lock_timeout;

RESET statement_timeout;

BEGIN;

UPDATE jobs_transport_alembic_version SET version_num='harel_sa_0002' WHERE jobs_transport_alembic_version.version_num = 'harel_sa_0001';

COMMIT;

